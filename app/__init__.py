"""tasklease: durable asynchronous jobs for long AI work on SQS, Lambda and PostgreSQL."""

__version__ = "0.6.0.dev0"
