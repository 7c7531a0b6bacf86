from services.memory.service import build, migrate
from shared.server import run_main

run_main("memory", build, migrate)
