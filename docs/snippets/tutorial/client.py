"""Submit a greeting with the Python client, follow it, and print its result."""

import os

from tasklease.client import Client

with Client(os.environ["TASKLEASE_API_URL"], os.environ["TASKLEASE_API_KEY"]) as tl:
    job = tl.submit("tutorial.greet", {"name": "Grace"}, idempotency_key="greet-grace")
    for event in tl.stream(job.id):  # transitions, then `end` once it finished
        print(event.type, event.data)
    done = tl.wait(job.id, timeout=60)
    print(done.state, done.result)
