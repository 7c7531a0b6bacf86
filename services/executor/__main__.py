from services.executor.service import build, migrate
from shared.server import run_main

run_main("executor", build, migrate)
