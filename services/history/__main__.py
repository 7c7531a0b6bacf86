from shared.server import run_main
from services.history.service import build, migrate
run_main("history", build, migrate)
