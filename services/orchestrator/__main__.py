from services.orchestrator.service import build, migrate
from shared.server import run_main

run_main("orchestrator", build, migrate)
