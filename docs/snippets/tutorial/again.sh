curl -s -X POST "$TASKLEASE_API_URL/v1/jobs" -H "$AUTH" -H 'content-type: application/json' \
     -H 'Idempotency-Key: greet-ada' \
     -d '{"kind": "tutorial.greet", "payload": {"name": "Ada"}}'; echo   # the same job, not a new one
curl -s -o /dev/null -w '%{http_code}\n' -X POST "$TASKLEASE_API_URL/v1/jobs" -H "$AUTH" \
     -H 'content-type: application/json' -d '{"kind": "tutorial.greet", "payload": {}}'   # 422
tasklease submit tutorial.greet --payload '{"name": "nobody"}' --wait || echo "exit status $?"
tasklease dlq list --kind tutorial.greet                      # nobody's job, with its reason
cat greetings.txt                                             # one line per delivered greeting
