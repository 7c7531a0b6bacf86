from services.history.service import build, migrate
from shared.server import run_main

run_main("history", build, migrate)
