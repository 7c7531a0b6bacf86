from shared.server import run_main
from services.scheduler.service import build, migrate
run_main("scheduler", build, migrate)
