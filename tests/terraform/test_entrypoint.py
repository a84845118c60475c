"""infra/docker/kvcm-entrypoint.sh against a stand-in for Secrets Manager on loopback: it signs
GetSecretValue with SigV4 (curl --aws-sigv4), exports the secret under its KVCM_ name, drops
SECRET_ARNS, and refuses names and ARNs it must not handle."""
import http.server
import json
import os
import pathlib
import subprocess
import threading

import pytest

ENTRYPOINT = pathlib.Path(__file__).resolve().parents[2] / "infra" / "docker" / "kvcm-entrypoint.sh"
ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:kvcm-prod/valkey-auth-token-AbCdEf"


@pytest.fixture
def secrets_manager():
    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": json.loads(body)})
            reply = json.dumps({"ARN": ARN, "SecretString": "s3cr3t-Valkey-token"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def run(env, cmd='printf "%s|%s" "$KVCM_VALKEY_PASSWORD" "${SECRET_ARNS:-unset}"'):
    base = {"PATH": os.environ["PATH"], "AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
            "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG", "AWS_SESSION_TOKEN": "session-token-1"}
    return subprocess.run(["sh", str(ENTRYPOINT), "sh", "-c", cmd], env={**base, **env},
                          capture_output=True, text=True, timeout=30)


def test_fetches_and_exports_the_secret(secrets_manager):
    url, seen = secrets_manager
    out = run({"SECRETS_MANAGER_ENDPOINT": url, "SECRET_ARNS": f"KVCM_VALKEY_PASSWORD={ARN}"})
    assert out.returncode == 0, out.stderr
    assert out.stdout == "s3cr3t-Valkey-token|unset"
    assert "s3cr3t" not in out.stderr
    (req,) = seen
    assert req["body"] == {"SecretId": ARN}
    assert req["headers"]["x-amz-target"] == "secretsmanager.GetSecretValue"
    assert req["headers"]["x-amz-security-token"] == "session-token-1"
    auth = req["headers"]["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/secretsmanager/aws4_request" in auth and "Signature=" in auth


def test_without_secret_arns_it_just_execs():
    out = run({}, cmd="echo ran")
    assert out.returncode == 0 and out.stdout == "ran\n"


@pytest.mark.parametrize("pairs", [f"PATH={ARN}", "KVCM_VALKEY_PASSWORD=arn:aws:s3:::bucket", 'KVCM_X=arn:aws:secretsmanager:eu-west-1:123456789012:secret:a"b'])
def test_refuses_bad_names_and_arns(secrets_manager, pairs):
    url, seen = secrets_manager
    out = run({"SECRETS_MANAGER_ENDPOINT": url, "SECRET_ARNS": pairs}, cmd="echo ran")
    assert out.returncode != 0 and "ran" not in out.stdout
    assert seen == []


def test_fails_when_secrets_manager_fails():
    out = run({"SECRETS_MANAGER_ENDPOINT": "http://127.0.0.1:9", "SECRET_ARNS": f"KVCM_VALKEY_PASSWORD={ARN}"}, cmd="echo ran")
    assert out.returncode != 0 and "GetSecretValue failed" in out.stderr
