"""The deployment without servers (over 400 lines: one case per deployed service and setting):
docker-compose wiring, scripts/setup.sh, production settings,
queues, the job's Kafka source options. Against servers (health checks, client configurations,
Spark's own Kafka source, the HBase transport): tests/integration/test_deploy_servers.py.

No Docker engine runs here: the compose file is validated by `docker-compose config` and its
wiring checked by loading it. Settings are loaded in fresh interpreters with the environment a
container would have, as `django.setup()` in a service does; which variables they read is
recorded as they load, never looked up in their source.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import ROOT

COMPOSE = ROOT / "docker-compose.yml"
GOOD_KEY = "k" * 20 + "-random-enough-for-the-check-" + "z" * 20
APP_VARS = re.compile(r"^(OFFSETWATCH_\w+|DATABASE_URL|REDIS_URL)$")


# --- docker-compose ----------------------------------------------------------------------------

def env_example() -> dict[str, str]:
    values = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, value = line.partition("=")
            values[name.strip()] = value
    return values


@pytest.fixture(scope="module")
def compose_dir(tmp_path_factory) -> Path:
    """The compose file beside a .env made from .env.example (env_file: .env must exist)."""
    d = tmp_path_factory.mktemp("compose")
    shutil.copy(COMPOSE, d / "docker-compose.yml")
    shutil.copy(ROOT / "Dockerfile", d / "Dockerfile")
    env = env_example()
    env["POSTGRES_PASSWORD"] = "placeholder-password"
    env["OFFSETWATCH_SECRET_KEY"] = GOOD_KEY
    (d / ".env").write_text("".join(f"{k}={v}\n" for k, v in env.items()))
    return d


def docker_compose(directory: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not APP_VARS.match(k) and k != "POSTGRES_PASSWORD"}
    return subprocess.run(["docker-compose", "-f", str(directory / "docker-compose.yml"), *args],
                          cwd=directory, env=env, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def normalized(compose_dir) -> dict:
    result = docker_compose(compose_dir, "config")
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_config_is_valid(compose_dir):
    result = docker_compose(compose_dir, "config", "-q")
    assert result.returncode == 0, result.stderr


def test_compose_refuses_to_run_without_the_env_file(tmp_path):
    shutil.copy(COMPOSE, tmp_path / "docker-compose.yml")
    result = docker_compose(tmp_path, "config", "-q")
    assert result.returncode != 0
    assert ".env" in result.stderr or "POSTGRES_PASSWORD" in result.stderr, result.stderr


def test_the_services(normalized):
    assert set(normalized["services"]) == {
        "kafka", "zookeeper", "hbase", "postgres", "redis", "migrate", "web", "worker", "beat", "spark-job", "producer"}


# Loads the settings and the Celery app as a service starts them, recording every environment
# variable they read (os.environ.get, os.getenv and `in` all go through __getitem__).
RECORD_VARIABLES_READ = """
import json, os
read = set()
_getitem = os._Environ.__getitem__
def _recording(self, key):
    read.add(key)
    return _getitem(self, key)
os._Environ.__getitem__ = _recording
import django
django.setup()
import offsetwatch.celery
print(json.dumps(sorted(read)))
"""


@pytest.fixture(scope="module")
def variables_read() -> set[str]:
    """The environment variables the settings and the Celery app read when they load: with local
    defaults, and in production with every value of .env.example set (some are read only there)."""
    read: set[str] = set()
    for env in ({}, {**env_example(), **PRODUCTION}):
        result = subprocess.run([sys.executable, "-c", RECORD_VARIABLES_READ], cwd=ROOT, env=app_environment(env),
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr[-2000:]
        read |= set(json.loads(result.stdout.strip().splitlines()[-1]))
    return read


def test_every_app_variable_a_service_sets_is_read_by_the_settings(raw, variables_read):
    set_by_compose = {name for service in raw["services"].values()
                      for name in (service.get("environment") or {}) if APP_VARS.match(name)}
    assert {"DATABASE_URL", "REDIS_URL", "OFFSETWATCH_ENV"} <= set_by_compose
    assert sorted(set_by_compose - variables_read) == []


def test_every_env_example_variable_is_read_by_settings_or_compose(variables_read):
    compose_text = COMPOSE.read_text()  # the compose file is config: its ${NAME} interpolations
    unread = [name for name in env_example()
              if name not in variables_read and not re.search(r"\$\{" + name + r"[:}]", compose_text)]
    assert unread == []
    # ...and it holds no real secret: the production check refuses its key.
    assert env_example()["OFFSETWATCH_SECRET_KEY"].startswith("change-me")


def test_secrets_stay_out_of_git():
    ignored = subprocess.run(["git", "check-ignore", "--quiet", ".env"], cwd=ROOT, capture_output=True, text=True)
    assert ignored.returncode == 0, "git would track a .env: " + ignored.stderr
    tracked = subprocess.run(["git", "ls-files", ".env"], cwd=ROOT, capture_output=True, text=True).stdout
    assert tracked.strip() == ""


def test_published_host_ports_do_not_clash(normalized):
    published = [str(p["published"]) for s in normalized["services"].values() for p in s.get("ports", [])]
    assert published, "the dashboard must be published"
    assert len(published) == len(set(published))
    # Only the dashboard faces the host; brokers and databases stay on the compose network.
    assert [name for name, s in normalized["services"].items() if s.get("ports")] == ["web"]


def test_every_dependency_waits_for_health_or_completion(normalized):
    services = normalized["services"]
    for name, service in services.items():
        for target, how in (service.get("depends_on") or {}).items():
            condition = how["condition"]
            if target == "migrate":
                assert condition == "service_completed_successfully", (name, target)
            else:
                assert condition == "service_healthy", (name, target)
                assert "healthcheck" in services[target], f"{name} waits for {target}, which has no healthcheck"


def test_long_running_services_have_health_checks(normalized):
    services = normalized["services"]
    for name in ("kafka", "zookeeper", "hbase", "postgres", "redis", "web", "worker"):
        assert services[name]["healthcheck"]["test"], name
    web_check = " ".join(services["web"]["healthcheck"]["test"])
    assert "/healthz" in web_check
    worker_check = " ".join(services["worker"]["healthcheck"]["test"])
    assert "inspect ping" in worker_check and "offsetwatch.celery" in worker_check


def test_commands(normalized):
    services = normalized["services"]
    beats = [name for name, s in services.items() if "beat" in (s.get("command") or [])]
    assert beats == ["beat"]
    assert services["web"]["command"][:2] == ["gunicorn", "offsetwatch.wsgi"]
    assert services["worker"]["command"][:4] == ["celery", "-A", "offsetwatch.celery", "worker"]
    migrate = " ".join(services["migrate"]["command"])
    assert migrate.index("migrate --noinput") < migrate.index("collectstatic --noinput")
    job = services["spark-job"]
    assert job["command"][:3] == ["python", "-m", "reference_job.job"] and "--source=official" in job["command"]
    # The connector's version is the image's PySpark version (one SPARK_VERSION for both).
    spark_version = job["build"]["args"]["SPARK_VERSION"]
    assert f"spark-sql-kafka-0-10_2.13:{spark_version}" in job["environment"]["PYSPARK_SUBMIT_ARGS"]
    assert all(s["environment"]["OFFSETWATCH_ENV"] == "production"
               for name, s in services.items() if s.get("image", "").startswith("offsetwatch:"))


def test_data_lives_in_named_volumes(normalized):
    services = normalized["services"]
    for name, path in [("postgres", "/var/lib/postgresql/data"), ("kafka", "/var/lib/kafka/data"),
                       ("zookeeper", "/data"), ("hbase", "/data"), ("web", "/data/exports"),
                       ("worker", "/data/exports")]:
        # docker-compose v1 normalizes volumes to "source:target[:mode]"
        mounts = {v.split(":")[1]: v.split(":")[0] for v in services[name]["volumes"]}
        assert mounts[path] in normalized["volumes"], (name, path)  # a named volume, not a host path


def run_setup(tmp_path, *args: str, present: tuple[str, ...]) -> list[str]:
    """scripts/setup.sh run in a sandbox where only the commands `present` (and the shell's own
    tools) are installed: apt-get and sudo record what they are asked; Python and its packages
    count as installed. Returns the apt-get calls, one line of arguments each."""
    root, bin_dir = tmp_path / "repo", tmp_path / "bin"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / ".venv" / "bin").mkdir(parents=True)
    digest = subprocess.run(["sha256sum", "pyproject.toml"], cwd=root, capture_output=True, text=True).stdout.split()[0]
    (root / ".venv" / ".offsetwatch-installed").write_text(digest + "\n")  # packages up to date
    bin_dir.mkdir()
    for tool in ("dirname", "id", "sha256sum", "cut", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    calls = tmp_path / "apt-get.calls"
    stubs = {"apt-get": f'echo "$*" >> {calls}', "sudo": 'exec "$@"', "python3.11": "exit 0",
             **{name: "exit 0" for name in present}}
    for stub, body in [*((bin_dir / name, body) for name, body in stubs.items()), (root / ".venv/bin/python", "exit 0")]:
        stub.write_text(f"#!{shutil.which('bash')}\n{body}\n")
        stub.chmod(0o755)
    result = subprocess.run([shutil.which("bash"), "scripts/setup.sh", *args], cwd=root, capture_output=True, text=True,
                            env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, timeout=60)
    assert result.returncode == 0, result.stderr
    return calls.read_text().splitlines() if calls.exists() else []


def installed(calls: list[str]) -> list[str]:
    return [word for call in calls if call.split()[:1] == ["install"] for word in call.split()[1:]
            if not word.startswith("-")]


EVERYTHING_BUT_COMPOSE = ("java", "redis-server", "chromium", "pg_ctlcluster")


def test_setup_installs_docker_compose_for_tests_only_when_missing(tmp_path):
    calls = run_setup(tmp_path / "test", "--test", present=EVERYTHING_BUT_COMPOSE)
    assert "docker-compose" in installed(calls)
    assert all("--no-install-recommends" in call for call in calls if call.startswith("install"))
    assert "docker-compose" not in installed(run_setup(tmp_path / "run", present=EVERYTHING_BUT_COMPOSE))
    assert "docker-compose" not in installed(
        run_setup(tmp_path / "present", "--test", present=(*EVERYTHING_BUT_COMPOSE, "docker-compose")))


# --- production settings -----------------------------------------------------------------------

def app_environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without its application variables, then exactly `env`."""
    base = {k: v for k, v in os.environ.items() if not APP_VARS.match(k)}
    base.update({"DJANGO_SETTINGS_MODULE": "offsetwatch.settings", "DATABASE_URL": "sqlite:////tmp/ow-deploy-test.sqlite3"})
    base.update(env)
    return base


def load_settings(env: dict[str, str], code: str = "") -> subprocess.CompletedProcess:
    """Import the settings in a fresh interpreter with exactly this application environment."""
    script = "import django; django.setup()\nfrom django.conf import settings\n" + code
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=app_environment(env), capture_output=True,
                          text=True, timeout=60)


PRODUCTION = {"OFFSETWATCH_ENV": "production", "OFFSETWATCH_SECRET_KEY": GOOD_KEY,
              "OFFSETWATCH_ALLOWED_HOSTS": "offsetwatch.example.com"}


@pytest.mark.parametrize("change, variable, says", [
    # 1. the local default key (production must never sign sessions with a published key)
    ({"OFFSETWATCH_SECRET_KEY": ""}, "OFFSETWATCH_SECRET_KEY", "local default"),
    # 2. .env.example copied as is
    ({"OFFSETWATCH_SECRET_KEY": env_example()["OFFSETWATCH_SECRET_KEY"]}, "OFFSETWATCH_SECRET_KEY", "placeholder"),
    # 3. too short to resist guessing
    ({"OFFSETWATCH_SECRET_KEY": "x" * 49}, "OFFSETWATCH_SECRET_KEY", "49 characters"),
    # 4. debug pages on a network
    ({"OFFSETWATCH_DEBUG": "true"}, "OFFSETWATCH_DEBUG", "set OFFSETWATCH_DEBUG=false"),
    # 5. no host allowed: every request would fail, and an operator might "fix" it with *
    ({"OFFSETWATCH_ALLOWED_HOSTS": ""}, "OFFSETWATCH_ALLOWED_HOSTS", "is empty"),
    # 6. a wildcard: Host-header attacks
    ({"OFFSETWATCH_ALLOWED_HOSTS": "offsetwatch.example.com,*"}, "OFFSETWATCH_ALLOWED_HOSTS", "wildcard"),
])
def test_production_refuses_unsafe_settings(change, variable, says):
    env = {**PRODUCTION, **change}
    if change.get("OFFSETWATCH_SECRET_KEY") == "":
        del env["OFFSETWATCH_SECRET_KEY"]
    result = load_settings(env)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("django.core.exceptions.ImproperlyConfigured:"), last
    assert variable in last and says in last, last


def test_production_settings_when_safe():
    result = load_settings({**PRODUCTION, "OFFSETWATCH_CSRF_TRUSTED_ORIGINS": "https://offsetwatch.example.com",
                            "OFFSETWATCH_SECURE_PROXY_SSL_HEADER": "true", "OFFSETWATCH_HSTS_SECONDS": "3600"},
                           "import json; print(json.dumps([settings.SESSION_COOKIE_SECURE, settings.CSRF_COOKIE_SECURE, "
                           "settings.CSRF_TRUSTED_ORIGINS, list(settings.SECURE_PROXY_SSL_HEADER), settings.SECURE_HSTS_SECONDS, "
                           "settings.MIDDLEWARE[settings.MIDDLEWARE.index('django.middleware.security.SecurityMiddleware') + 1], "
                           "settings.LOG_FORMAT]))")
    assert result.returncode == 0, result.stderr
    # WhiteNoise right after SecurityMiddleware, as its documentation asks.
    assert json.loads(result.stdout) == [True, True, ["https://offsetwatch.example.com"],
                                         ["HTTP_X_FORWARDED_PROTO", "https"], 3600,
                                         "whitenoise.middleware.WhiteNoiseMiddleware", "json"]


def test_local_defaults_stay_as_the_tests_and_demo_use_them():
    result = load_settings({}, "import json; print(json.dumps([settings.PRODUCTION, settings.SESSION_COOKIE_SECURE, "
                               "settings.SECURE_PROXY_SSL_HEADER, settings.SECURE_HSTS_SECONDS, "
                               "any('whitenoise' in m for m in settings.MIDDLEWARE), settings.LOG_FORMAT]))")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [False, False, None, 0, False, "plain"]


@pytest.mark.parametrize("env, says", [
    ({"OFFSETWATCH_ENV": "staging"}, "OFFSETWATCH_ENV='staging' is not a known environment"),
    ({"OFFSETWATCH_CSRF_TRUSTED_ORIGINS": "offsetwatch.example.com"}, "OFFSETWATCH_CSRF_TRUSTED_ORIGINS"),
    ({"OFFSETWATCH_CELERY_QUEUES": "collect,polls"}, "OFFSETWATCH_CELERY_QUEUES: unknown queue 'polls'"),
    ({"OFFSETWATCH_LOG_FORMAT": "xml"}, "OFFSETWATCH_LOG_FORMAT='xml'"),
    ({"OFFSETWATCH_KAFKA_CLIENT_CONFIGS": "{nope"}, "OFFSETWATCH_KAFKA_CLIENT_CONFIGS is not valid JSON"),
    ({"OFFSETWATCH_KAFKA_CLIENT_CONFIGS": '{"prod": "SASL_SSL"}'}, "OFFSETWATCH_KAFKA_CLIENT_CONFIGS['prod'] must map"),
])
def test_bad_deployment_values_name_the_variable(env, says):
    result = load_settings(env)
    assert result.returncode != 0 and says in result.stderr.strip().splitlines()[-1], result.stderr[-500:]


def test_secret_key_from_a_file(tmp_path):
    (tmp_path / "key").write_text(GOOD_KEY + "\n")
    env = {**PRODUCTION, "OFFSETWATCH_SECRET_KEY_FILE": str(tmp_path / "key")}
    del env["OFFSETWATCH_SECRET_KEY"]
    result = load_settings(env, "print(settings.SECRET_KEY)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == GOOD_KEY


def test_json_logs_are_one_parseable_object_per_line():
    code = ("import logging\nlog = logging.getLogger('offsetwatch.test')\n"
            "log.warning('poll of %s failed:\\nline two', 'store:7', extra={'source': 'store:7', 'attempt': 2})\n"
            "try:\n    1 / 0\nexcept ZeroDivisionError:\n    log.exception('boom')\n")
    result = load_settings({"OFFSETWATCH_LOG_FORMAT": "json"}, code)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 2
    first, second = lines
    assert first["level"] == "WARNING" and first["logger"] == "offsetwatch.test"
    assert first["message"] == "poll of store:7 failed:\nline two"
    assert (first["source"], first["attempt"]) == ("store:7", 2)
    assert first["time"].endswith("+00:00")
    assert second["message"] == "boom" and "ZeroDivisionError" in second["exc_info"]


def test_gunicorn_serves_static_files_through_whitenoise(tmp_path):
    """collectstatic (what the migrate service runs), then a hashed static file is served."""
    env = {**PRODUCTION, "OFFSETWATCH_STATIC_ROOT": str(tmp_path / "static"), "OFFSETWATCH_ALLOWED_HOSTS": "testserver"}
    code = ("from django.core.management import call_command\ncall_command('collectstatic', '--noinput', verbosity=0)\n"
            "from django.templatetags.static import static\nfrom django.test import Client\n"
            "url = static('admin/css/base.css')\nresp = Client().get(url)\n"
            "print(url, resp.status_code, resp.headers.get('Cache-Control'))")
    result = load_settings(env, code)
    assert result.returncode == 0, result.stderr[-2000:]
    url, status, *cache = result.stdout.split()
    assert re.fullmatch(r"/static/admin/css/base\.[0-9a-f]{12}\.css", url), url
    assert status == "200"
    assert "immutable" in " ".join(cache)


# --- queues ------------------------------------------------------------------------------------

def test_polls_go_to_the_collect_queue_everything_else_to_default():
    from offsetwatch.celery import app

    route = app.amqp.router.route
    assert route({}, "collectors.tasks.poll_store")["queue"].name == "collect"
    assert route({}, "collectors.tasks.poll_cluster")["queue"].name == "collect"
    for task in ("collectors.tasks.collect_all", "collectors.tasks.prune", "collectors.tasks.expire_rewinds",
                 "dashboard.tasks.export_run", "dashboard.tasks.notify_deliver"):
        assert route({}, task)["queue"].name == "default", task
    assert set(app.amqp.queues) == {"collect", "default"}


# --- the job's Kafka source ----------------------------------------------------------------------

def test_official_source_options_from_the_start_plan():
    from reference_job.sources import kafka_read_options
    from streamoffsets.restart import spark_starting_offsets_json

    starting = spark_starting_offsets_json("orders", {0: 5, 1: 7, 2: 0})
    fmt, options = kafka_read_options(source="official", bootstrap="kafka:9092", topic="orders",
                                      starting_offsets=starting, partitions=3, max_offsets_per_partition=100,
                                      kafka_options={"security.protocol": "SASL_SSL"})
    assert fmt == "kafka"
    assert options == {"kafka.bootstrap.servers": "kafka:9092", "subscribe": "orders", "startingOffsets": starting,
                       "kafka.security.protocol": "SASL_SSL", "maxOffsetsPerTrigger": "300", "failOnDataLoss": "true"}
    assert json.loads(options["startingOffsets"]) == {"orders": {"0": 5, "1": 7, "2": 0}}
    fmt, options = kafka_read_options(source="python", bootstrap="b:9092", topic="orders", starting_offsets=starting,
                                      partitions=3, max_offsets_per_partition=100)
    assert fmt == "offsetwatch_kafka" and options["maxOffsetsPerPartition"] == "100"
    assert "maxOffsetsPerTrigger" not in options and "failOnDataLoss" not in options
    with pytest.raises(ValueError, match="unknown Kafka source 'kafka10'"):
        kafka_read_options(source="kafka10", bootstrap="b", topic="t", starting_offsets="{}", partitions=1)


def test_job_source_option_defaults_to_the_python_source():
    result = subprocess.run([sys.executable, "-m", "reference_job.job", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0
    assert re.search(r"--source \{python,official\}", result.stdout)
    from reference_job.job import JobConfig

    assert JobConfig("b", "t", "g", "hbase://h/t", Path("o")).source == "python"
