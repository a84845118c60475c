"""Schemathesis hooks for kvcm (loaded through SCHEMATHESIS_HOOKS by tests/fuzz/run.sh): every
generated request is checked against kvcm's invariants (kvcm_fuzz.Guard) on top of
Schemathesis' own checks, and the number of requests checked is recorded for the summary."""

import atexit

import schemathesis

from kvcm_fuzz import Guard

GUARD = Guard()
atexit.register(GUARD.record_count)


@schemathesis.hook
def before_call(context, case, kwargs):
    GUARD.before()


@schemathesis.check
def kvcm_invariants(ctx, response, case):
    """No 5xx, the Tair header on every RPC reply, and no change from a rejected request."""
    problem = GUARD.after(case.method.upper(), case.path, response.status_code, response.content)
    if problem:
        raise AssertionError(problem)
