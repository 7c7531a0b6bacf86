from shared.server import run_main
from services.router.service import build, migrate
run_main("router", build, migrate)
