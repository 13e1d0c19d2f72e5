"""Where the repository is, for tests that run its commands (manage.py, python -m ...) or load its
config files (docker-compose.yml, .env.example), wherever the test module sits under tests/."""
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
