"""The AWS cost model behind ``tasklease cost``: what a job costs on Lambda, SQS, API
Gateway and RDS from measured figures (``make cost``) and a price table
(``aws_prices.json``), and what the same jobs cost on Lambda durable functions. Pure
arithmetic over files; the CLI (``app/cli/cost.py``) only reads arguments and prints.
"""
