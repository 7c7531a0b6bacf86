from shared.server import run_main
from services.executor.service import build, migrate
run_main("executor", build, migrate)
