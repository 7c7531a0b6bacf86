from shared.server import run_main
from services.memory.service import build, migrate
run_main("memory", build, migrate)
