#!/bin/sh
# Entrypoint of the kvcm image: runs its arguments (kvcm-api, kvcm-worker), after fetching
# secrets from AWS Secrets Manager when SECRET_ARNS asks for it.
#
#   SECRET_ARNS="KVCM_VALKEY_PASSWORD=arn:aws:secretsmanager:… KVCM_BOOTSTRAP_ADMIN_PASSWORD=arn:…"
#
# For each NAME=ARN pair it calls secretsmanager:GetSecretValue with the credentials of the AWS
# Lambda execution environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
# AWS_REGION), signed by curl (--aws-sigv4), and exports NAME with the secret's SecretString.
# This is how the Lambda functions get their secrets: only the ARNs are in the function's
# configuration (and in Terraform state), never the values. ECS tasks use ECS's own `secrets`
# injection instead and leave SECRET_ARNS unset, so this script just execs its arguments.
# Only names starting with KVCM_ may be set. Nothing here prints a secret.
set -eu

if [ -n "${SECRET_ARNS:-}" ]; then
  region="${AWS_REGION:?kvcm-entrypoint: AWS_REGION is required to fetch SECRET_ARNS}"
  endpoint="${SECRETS_MANAGER_ENDPOINT:-https://secretsmanager.${region}.amazonaws.com}"
  : "${AWS_ACCESS_KEY_ID:?kvcm-entrypoint: no AWS credentials in the environment to fetch SECRET_ARNS}"
  : "${AWS_SECRET_ACCESS_KEY:?kvcm-entrypoint: no AWS credentials in the environment to fetch SECRET_ARNS}"
  for pair in $SECRET_ARNS; do
    name="${pair%%=*}"
    arn="${pair#*=}"
    case "$name" in
      KVCM_*) ;;
      *) echo "kvcm-entrypoint: SECRET_ARNS may only set KVCM_* variables, not '$name'" >&2; exit 1 ;;
    esac
    # A Secrets Manager ARN, nothing else (it goes into a JSON body unescaped).
    if ! printf '%s' "$arn" | grep -Eq '^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:[0-9]{12}:secret:[A-Za-z0-9/_+=.@-]+$'; then
      echo "kvcm-entrypoint: $name: not a Secrets Manager secret ARN" >&2
      exit 1
    fi
    # The credentials go to curl on stdin (a config file), not on its command line.
    reply="$(
      {
        printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY"
        if [ -n "${AWS_SESSION_TOKEN:-}" ]; then
          printf 'header = "x-amz-security-token: %s"\n' "$AWS_SESSION_TOKEN"
        fi
      } | curl --config - --fail --silent --show-error --max-time 10 --retry 2 \
        --aws-sigv4 "aws:amz:${region}:secretsmanager" \
        --header 'Content-Type: application/x-amz-json-1.1' \
        --header 'X-Amz-Target: secretsmanager.GetSecretValue' \
        --data "{\"SecretId\":\"${arn}\"}" "${endpoint}/"
    )" || { echo "kvcm-entrypoint: $name: GetSecretValue failed" >&2; exit 1; }
    value="$(printf '%s' "$reply" | jq -er '.SecretString')" \
      || { echo "kvcm-entrypoint: $name: the reply has no SecretString" >&2; exit 1; }
    export "$name=$value"
  done
  unset SECRET_ARNS
fi

exec "$@"
