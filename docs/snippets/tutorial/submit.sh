cd ~/greet
eval "$(tasklease env)"         # TASKLEASE_API_URL, TASKLEASE_API_KEY, … of the running stack
AUTH="Authorization: Bearer $TASKLEASE_API_KEY"
curl -s -X POST "$TASKLEASE_API_URL/v1/jobs" -H "$AUTH" -H 'content-type: application/json' \
     -H 'Idempotency-Key: greet-ada' \
     -d '{"kind": "tutorial.greet", "payload": {"name": "Ada"}}' | tee job.json; echo   # 202 Accepted
ID=$(python -c 'import json; print(json.load(open("job.json"))["id"])')
curl -sN -H "$AUTH" "$TASKLEASE_API_URL/v1/jobs/$ID/stream"         # its events as they happen; ends with `end`
curl -s -H "$AUTH" "$TASKLEASE_API_URL/v1/jobs/$ID"; echo           # state, attempt, result
curl -s -H "$AUTH" "$TASKLEASE_API_URL/v1/jobs/$ID/effects"; echo   # compose, deliver: recorded once
tasklease jobs show "$ID"                                           # the same as tables: timeline, effects
