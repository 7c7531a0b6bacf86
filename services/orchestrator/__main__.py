from shared.server import run_main
from services.orchestrator.service import build, migrate
run_main("orchestrator", build, migrate)
