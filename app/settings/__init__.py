"""Every setting of tasklease, in one package: what a process reads from its environment
(``config.Settings``, TASKLEASE_*), the per-tenant model, queue and retention settings it
builds on, the bounds the database's CHECKs enforce (``bounds``) and the AWS quotas the
settings are checked against (``aws_limits``). Nothing here does I/O beyond reading the
environment and ``shared_settings.json`` (which Terraform reads too).
"""
