from services.scheduler.service import build, migrate
from shared.server import run_main

run_main("scheduler", build, migrate)
