from services.router.service import build, migrate
from shared.server import run_main

run_main("router", build, migrate)
