# --- naming and placement ------------------------------------------------------

variable "name" {
  description = "Prefix of every resource name (queues become <name>-jobs and <name>-jobs-dlq, as the app names them)."
  type        = string
  default     = "tasklease"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,30}[a-z0-9]$", var.name))
    error_message = "name must be 3-32 characters of lower-case letters, digits and '-', starting with a letter."
  }
}

variable "aws_region" {
  description = "AWS region to deploy into."
  type        = string
  default     = "us-east-1"

  validation {
    condition     = can(regex("^[a-z]{2}(-gov)?-[a-z]+-[0-9]$", var.aws_region))
    error_message = "aws_region must look like us-east-1."
  }
}

variable "availability_zones" {
  description = "At least two availability zones for the private subnets; empty means <region>a and <region>b."
  type        = list(string)
  default     = []

  validation {
    condition     = length(var.availability_zones) == 0 || length(var.availability_zones) >= 2
    error_message = "availability_zones must be empty or list at least two zones (RDS subnet groups need two)."
  }
}

variable "vpc_cidr" {
  description = "CIDR block of the VPC; private subnets take /24s from its start, public ones (NAT only) from .100 on."
  type        = string
  default     = "10.40.0.0/16"

  validation {
    condition     = can(cidrhost(var.vpc_cidr, 0)) && tonumber(split("/", var.vpc_cidr)[1]) <= 16
    error_message = "vpc_cidr must be a valid IPv4 CIDR block of /16 or larger."
  }
}

variable "deployment_profile" {
  description = "The deployment's shape (docs/howto/deploy-aws.md#profiles). small: no interface endpoints and no NAT gateway (the functions reach SQS, Secrets Manager and a model provider over IPv6 through an egress-only internet gateway), Single-AZ database, worker at 256 MB, tracing PassThrough, EMF metrics bounded. production: interface endpoints, Multi-AZ database, a NAT gateway per availability zone with enable_nat_gateway, tracing Active, every EMF metric."
  type        = string
  default     = "production"

  validation {
    condition     = contains(["small", "production"], var.deployment_profile)
    error_message = "deployment_profile must be small or production."
  }
}

variable "enable_nat_gateway" {
  description = "Give the Lambdas a route to the IPv4 internet through NAT gateways (one per availability zone in production, one in small): needed for a model provider or webhook that IPv6 (small) does not reach. In production SQS and Secrets Manager are reached through VPC endpoints either way."
  type        = bool
  default     = false
}

variable "skip_requesting_account_id" {
  description = "Do not look up the account ID (STS/IAM). Only for plans against a LocalStack that runs SQS alone (`make plan`); leave false on AWS."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Extra tags for every resource."
  type        = map(string)
  default     = {}
}

# --- shared with the app (null = the value in app/settings/shared_settings.json) ----------

variable "visibility_timeout_seconds" {
  description = "Source queue visibility timeout, i.e. the lease. Null takes app/settings/shared_settings.json. Must be at least 6 x worker_timeout_seconds."
  type        = number
  default     = null

  validation {
    condition     = var.visibility_timeout_seconds == null ? true : (var.visibility_timeout_seconds >= 1 && var.visibility_timeout_seconds <= 43200 && floor(var.visibility_timeout_seconds) == var.visibility_timeout_seconds)
    error_message = "visibility_timeout_seconds must be a whole number from 1 to 43200 (SQS's 12-hour cap)."
  }
}

variable "worker_timeout_seconds" {
  description = "Timeout of the worker function. Null takes app/settings/shared_settings.json. The engine hands a lease back before it runs out."
  type        = number
  default     = null

  validation {
    condition     = var.worker_timeout_seconds == null ? true : (var.worker_timeout_seconds >= 1 && var.worker_timeout_seconds <= 900 && floor(var.worker_timeout_seconds) == var.worker_timeout_seconds)
    error_message = "worker_timeout_seconds must be a whole number from 1 to 900 (Lambda's 15-minute cap)."
  }
}

variable "max_attempts" {
  description = "Attempt budget per job, counted in the database at claim time. Null takes app/settings/shared_settings.json."
  type        = number
  default     = null

  validation {
    condition     = var.max_attempts == null ? true : (var.max_attempts >= 1 && var.max_attempts <= 100)
    error_message = "max_attempts must be from 1 to 100."
  }
}

variable "max_receive_count" {
  description = "Redrive policy maxReceiveCount: the last backstop, well above max_attempts. Null takes app/settings/shared_settings.json."
  type        = number
  default     = null

  validation {
    condition     = var.max_receive_count == null ? true : (var.max_receive_count >= 1 && var.max_receive_count <= 1000)
    error_message = "max_receive_count must be from 1 to 1000."
  }
}

variable "batch_size" {
  description = "Messages per worker invocation (event source mapping). Null takes app/settings/shared_settings.json."
  type        = number
  default     = null

  validation {
    condition     = var.batch_size == null ? true : (var.batch_size >= 1 && var.batch_size <= 10)
    error_message = "batch_size must be from 1 to 10 (the app's limit, which is SQS's ReceiveMessage maximum)."
  }
}

variable "message_retention_seconds" {
  description = "Source queue message retention. Null takes app/settings/shared_settings.json."
  type        = number
  default     = null

  validation {
    condition     = var.message_retention_seconds == null ? true : (var.message_retention_seconds >= 60 && var.message_retention_seconds <= 1209600)
    error_message = "message_retention_seconds must be from 60 to 1209600 (14 days)."
  }
}

variable "dlq_retention_seconds" {
  description = "Dead-letter queue retention; longer than the source's, since a dead-lettered message keeps its original enqueue time. Null takes app/settings/shared_settings.json."
  type        = number
  default     = null

  validation {
    condition     = var.dlq_retention_seconds == null ? true : (var.dlq_retention_seconds >= 60 && var.dlq_retention_seconds <= 1209600)
    error_message = "dlq_retention_seconds must be from 60 to 1209600 (14 days)."
  }
}

# --- functions -------------------------------------------------------------------

variable "lambda_package_path" {
  description = "Path of the zip built by `make package`; null means infra/build/lambda.zip."
  type        = string
  default     = null
}

variable "lambda_runtime" {
  description = "Python runtime of the functions (Amazon Linux 2023); must match LAMBDA_RUNTIME used by `make package` (checked against the package manifest)."
  type        = string
  default     = "python3.13"

  validation {
    condition     = contains(["python3.13", "python3.12"], var.lambda_runtime)
    error_message = "lambda_runtime must be python3.13 or python3.12 (the runtimes `make package` builds for)."
  }
}

variable "lambda_architecture" {
  description = "Instruction set of the functions (arm64: Graviton, less per GB-second); must match LAMBDA_ARCH used by `make package` (checked against the package manifest)."
  type        = string
  default     = "arm64"

  validation {
    condition     = contains(["arm64", "x86_64"], var.lambda_architecture)
    error_message = "lambda_architecture must be arm64 or x86_64."
  }
}

variable "api_memory_mb" {
  description = "Memory of the API function."
  type        = number
  default     = 512

  validation {
    condition     = var.api_memory_mb >= 128 && var.api_memory_mb <= 10240
    error_message = "api_memory_mb must be from 128 to 10240."
  }
}

variable "worker_memory_mb" {
  description = "Memory of the worker function. Null takes the deployment_profile's (small 256, production 1024)."
  type        = number
  default     = null

  validation {
    condition     = var.worker_memory_mb == null || (coalesce(var.worker_memory_mb, 0) >= 128 && coalesce(var.worker_memory_mb, 0) <= 10240)
    error_message = "worker_memory_mb must be from 128 to 10240."
  }
}

variable "sweeper_memory_mb" {
  description = "Memory of the sweeper function."
  type        = number
  default     = 256

  validation {
    condition     = var.sweeper_memory_mb >= 128 && var.sweeper_memory_mb <= 10240
    error_message = "sweeper_memory_mb must be from 128 to 10240."
  }
}

variable "api_timeout_seconds" {
  description = "Timeout of the API function; API Gateway HTTP APIs give up after 30 s."
  type        = number
  default     = 29

  validation {
    condition     = var.api_timeout_seconds >= 1 && var.api_timeout_seconds <= 30
    error_message = "api_timeout_seconds must be from 1 to 30 (the HTTP API integration timeout)."
  }
}

variable "sweeper_timeout_seconds" {
  description = "Timeout of the sweeper function; below the schedule's one-minute period so runs do not pile up."
  type        = number
  default     = 55

  validation {
    condition     = var.sweeper_timeout_seconds >= 1 && var.sweeper_timeout_seconds < 60
    error_message = "sweeper_timeout_seconds must be from 1 to 59."
  }
}

variable "worker_maximum_concurrency" {
  description = "Most worker invocations the SQS event source runs at once (scaling_config.maximum_concurrency); also bounds database connections."
  type        = number
  default     = 10

  validation {
    condition     = var.worker_maximum_concurrency >= 2 && var.worker_maximum_concurrency <= 1000
    error_message = "worker_maximum_concurrency must be from 2 to 1000 (AWS's range)."
  }
}

variable "priority_weights" {
  description = "Each priority's share of the workers (TASKLEASE_PRIORITY_WEIGHTS): each queue's event source mapping gets maximum_concurrency = max(2, worker_maximum_concurrency x weight / the weights' sum)."
  type = object({
    high   = number
    normal = number
    low    = number
  })
  default = { high = 6, normal = 3, low = 1 }

  validation {
    condition     = alltrue([for w in values(var.priority_weights) : w >= 1 && w <= 1000 && floor(w) == w])
    error_message = "priority_weights must be whole numbers from 1 to 1000 (0 would starve a queue)."
  }
}

variable "maximum_batching_window_seconds" {
  description = "How long the event source waits to fill a batch. 0: jobs are long, so a fuller batch saves little and the wait adds latency."
  type        = number
  default     = 0

  validation {
    condition     = var.maximum_batching_window_seconds >= 0 && var.maximum_batching_window_seconds <= 300
    error_message = "maximum_batching_window_seconds must be from 0 to 300."
  }
}

variable "worker_drain_version" {
  description = "A published version of the worker function (the worker_version output of an earlier apply) kept subscribed to the queues as the alias \"drain\", beside the new code, so that jobs of a kind declared on_version_change=\"pin\" that started on it finish there (docs/howto/kind-versions.md). \"\": none. Clear it once no job of that version is unfinished."
  type        = string
  default     = ""

  validation {
    condition     = var.worker_drain_version == "" || can(regex("^[1-9][0-9]*$", var.worker_drain_version))
    error_message = "worker_drain_version must be \"\" or a published version number such as \"7\" (not $LATEST)."
  }
}

variable "worker_drain_maximum_concurrency" {
  description = "The drain alias's event source mappings' maximum concurrency, per priority queue: it claims only the jobs pinned to its version and hands the rest back, so a little is enough."
  type        = number
  default     = 2

  validation {
    condition     = var.worker_drain_maximum_concurrency >= 2 && var.worker_drain_maximum_concurrency <= 1000
    error_message = "worker_drain_maximum_concurrency must be from 2 to 1000 (the event source mapping's range)."
  }
}

variable "db_pool_max_size" {
  description = "Connections per function instance (TASKLEASE_POOL_MAX_SIZE). Worst case: worker_maximum_concurrency x this, plus the API's concurrency x this, must fit the instance's max_connections."
  type        = number
  default     = 4

  validation {
    condition     = var.db_pool_max_size >= 1 && var.db_pool_max_size <= 100
    error_message = "db_pool_max_size must be from 1 to 100."
  }
}

variable "sweeper_schedule_expression" {
  description = "EventBridge Scheduler expression for the sweeper (which also relays the outbox)."
  type        = string
  default     = "rate(1 minute)"

  validation {
    condition     = can(regex("^(rate|cron)\\(.+\\)$", var.sweeper_schedule_expression))
    error_message = "sweeper_schedule_expression must be a rate(...) or cron(...) expression."
  }
}

variable "log_level" {
  description = "TASKLEASE_LOG_LEVEL of the functions."
  type        = string
  default     = "INFO"

  validation {
    condition     = contains(["DEBUG", "INFO", "WARNING", "ERROR"], var.log_level)
    error_message = "log_level must be DEBUG, INFO, WARNING or ERROR."
  }
}

variable "log_retention_days" {
  description = "Retention of the functions', API's and VPC flow logs' log groups."
  type        = number
  default     = 365

  validation {
    condition     = contains([1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653], var.log_retention_days)
    error_message = "log_retention_days must be a value CloudWatch Logs accepts (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288 or 3653)."
  }
}

variable "kinds" {
  description = "TASKLEASE_KINDS: the modules that define your job kinds, comma-separated, shipped in the zip (make package KINDS_SOURCES=...). Empty: the functions have no kinds and say so. app.demos deploys the demos."
  type        = string
  default     = ""

  validation {
    condition     = can(regex("^[A-Za-z0-9_.,]*$", var.kinds))
    error_message = "kinds must be module names separated by commas (letters, digits, _ and .)."
  }
}

variable "model_provider" {
  description = "TASKLEASE_MODEL_PROVIDER, read by the demos (app.demos): fake (no network) or openai (needs enable_nat_gateway, openai_base_url, and an API key the app does not yet read from Secrets Manager; see infra/README.md)."
  type        = string
  default     = "fake"

  validation {
    condition     = contains(["fake", "openai"], var.model_provider)
    error_message = "model_provider must be fake or openai."
  }
}

variable "openai_base_url" {
  description = "TASKLEASE_OPENAI_BASE_URL, required by the demos when model_provider is openai."
  type        = string
  default     = null

  validation {
    condition     = var.openai_base_url == null ? true : can(regex("^https://", var.openai_base_url))
    error_message = "openai_base_url must be an https:// URL."
  }
}

variable "webhook_url" {
  description = "TASKLEASE_WEBHOOK_URL, where support.triage posts its draft reply (needs enable_nat_gateway)."
  type        = string
  default     = null

  validation {
    condition     = var.webhook_url == null ? true : can(regex("^https?://", var.webhook_url))
    error_message = "webhook_url must be an http(s):// URL."
  }
}

# --- API ---------------------------------------------------------------------------

# Who may call the API (infra/README.md, "Authentication"). AWS_IAM is not offered:
# SigV4 takes the Authorization header the app's keys use, and an IAM identity
# carries no tenant.
variable "api_auth_mode" {
  description = "How callers prove who they are: api_key (the route is open and the app checks `Authorization: Bearer tlk_...` keys made with `tasklease keys create`), jwt (an API Gateway JWT authorizer; the tenant is a token claim) or lambda (your REQUEST Lambda authorizer returns the tenant in its context)."
  type        = string
  default     = "api_key"

  validation {
    condition     = contains(["api_key", "jwt", "lambda"], var.api_auth_mode)
    error_message = "api_auth_mode must be api_key, jwt or lambda (AWS_IAM is not supported: an IAM identity carries no tenant; see infra/README.md)."
  }
}

variable "jwt_issuer" {
  description = "api_auth_mode = jwt: the token issuer (iss), an https:// URL that serves /.well-known/openid-configuration, e.g. https://cognito-idp.<region>.amazonaws.com/<user pool id>."
  type        = string
  default     = null

  validation {
    condition     = var.jwt_issuer == null ? true : can(regex("^https://[^\\s]+$", var.jwt_issuer))
    error_message = "jwt_issuer must be an https:// URL (API Gateway reads the issuer's OpenID configuration from it)."
  }

  validation {
    condition     = var.api_auth_mode != "jwt" || var.jwt_issuer != null
    error_message = "api_auth_mode = \"jwt\" needs jwt_issuer (and jwt_audience): the identity provider whose tokens the API accepts."
  }
}

variable "jwt_audience" {
  description = "api_auth_mode = jwt: accepted audiences; a token's aud (or, for Cognito access tokens, client_id) must be one of them."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for a in var.jwt_audience : length(trimspace(a)) > 0])
    error_message = "jwt_audience must not contain empty strings."
  }

  validation {
    condition     = var.api_auth_mode != "jwt" || length(var.jwt_audience) > 0
    error_message = "api_auth_mode = \"jwt\" needs jwt_audience (and jwt_issuer): at least one audience or client id the tokens are issued for."
  }
}

variable "jwt_tenant_claim" {
  description = "api_auth_mode = jwt: the claim holding the caller's tenant; the API function reads it at jwt.claims.<claim> (TASKLEASE_AUTHORIZER_TENANT_FIELD). Callers must not be able to set it themselves (Cognito: keep custom attributes read-only for the app client)."
  type        = string
  default     = "tenant"

  validation {
    # The app splits TASKLEASE_AUTHORIZER_TENANT_FIELD on dots (app/services/auth.py).
    condition     = can(regex("^[^.\\s]{1,128}$", var.jwt_tenant_claim))
    error_message = "jwt_tenant_claim must be a claim name of 1-128 characters without dots or spaces (the app reads the dotted path jwt.claims.<claim>; a namespaced claim such as https://example.com/tenant cannot be addressed)."
  }
}

variable "jwt_admin_claim" {
  description = "api_auth_mode = jwt: the claim that makes a caller an admin (every tenant's jobs, bulk redrive) when it is true; read at jwt.claims.<claim> (TASKLEASE_AUTHORIZER_ADMIN_FIELD). Null: no caller is an admin through the API."
  type        = string
  default     = "tasklease_admin"

  validation {
    condition     = var.jwt_admin_claim == null ? true : can(regex("^[^.\\s]{1,128}$", var.jwt_admin_claim))
    error_message = "jwt_admin_claim must be null or a claim name of 1-128 characters without dots or spaces (the app reads the dotted path jwt.claims.<claim>)."
  }
}

variable "lambda_authorizer_function_arn" {
  description = "api_auth_mode = lambda: ARN of your authorizer function (REQUEST type, payload 2.0, simple responses). It answers {\"isAuthorized\": true, \"context\": {\"tenant\": \"<tenant>\", \"admin\": false}}; the API function reads lambda.tenant and lambda.admin. Must be in this account: Terraform grants API Gateway permission to invoke it."
  type        = string
  default     = null

  validation {
    condition     = var.lambda_authorizer_function_arn == null ? true : can(regex("^arn:aws[a-z-]*:lambda:[a-z0-9-]+:[0-9]{12}:function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9_$-]{1,128})?$", var.lambda_authorizer_function_arn))
    error_message = "lambda_authorizer_function_arn must be a Lambda function ARN: arn:aws:lambda:<region>:<account>:function:<name>, optionally with :<alias or version>."
  }

  validation {
    condition     = var.api_auth_mode != "lambda" || var.lambda_authorizer_function_arn != null
    error_message = "api_auth_mode = \"lambda\" needs lambda_authorizer_function_arn: the function that decides and returns the caller's tenant."
  }
}

variable "lambda_authorizer_identity_sources" {
  description = "api_auth_mode = lambda: where the credentials are; a request missing any of them gets 401 without calling the authorizer, and they are the cache key."
  type        = list(string)
  default     = ["$request.header.Authorization"]

  validation {
    condition     = length(var.lambda_authorizer_identity_sources) > 0 && alltrue([for s in var.lambda_authorizer_identity_sources : can(regex("^\\$(request\\.(header|querystring)\\.|context\\.|stageVariables\\.)[^\\s]+$", s))])
    error_message = "lambda_authorizer_identity_sources must list at least one of $request.header.<name>, $request.querystring.<name>, $context.<name> or $stageVariables.<name>."
  }
}

variable "lambda_authorizer_cache_seconds" {
  description = "api_auth_mode = lambda: how long API Gateway caches an authorizer answer per identity (0 turns caching off; a revoked credential keeps working this long)."
  type        = number
  default     = 300

  validation {
    condition     = var.lambda_authorizer_cache_seconds >= 0 && var.lambda_authorizer_cache_seconds <= 3600 && floor(var.lambda_authorizer_cache_seconds) == var.lambda_authorizer_cache_seconds
    error_message = "lambda_authorizer_cache_seconds must be a whole number from 0 to 3600."
  }
}

# Per-tenant admission defaults (app/settings/config.py; the ranges are the app's). A tenant's
# own values: `tasklease limits set`. The stage throttle below caps all tenants together.
variable "tenant_rate_limit_per_second" {
  description = "TASKLEASE_RATE_LIMIT_PER_SECOND: job submissions per second each tenant may make, on average."
  type        = number
  default     = 50

  validation {
    condition     = var.tenant_rate_limit_per_second > 0 && var.tenant_rate_limit_per_second <= 100000
    error_message = "tenant_rate_limit_per_second must be above 0 and at most 100000."
  }
}

variable "tenant_rate_limit_burst" {
  description = "TASKLEASE_RATE_LIMIT_BURST: submissions a tenant may make at once; at most this many in any burst/rate seconds."
  type        = number
  default     = 100

  validation {
    condition     = var.tenant_rate_limit_burst >= 1 && var.tenant_rate_limit_burst <= 1000000 && floor(var.tenant_rate_limit_burst) == var.tenant_rate_limit_burst
    error_message = "tenant_rate_limit_burst must be a whole number from 1 to 1000000."
  }
}

variable "tenant_max_jobs_in_flight" {
  description = "TASKLEASE_MAX_JOBS_IN_FLIGHT: unfinished jobs a tenant may have before submissions are refused."
  type        = number
  default     = 10000

  validation {
    condition     = var.tenant_max_jobs_in_flight >= 1 && var.tenant_max_jobs_in_flight <= 100000000 && floor(var.tenant_max_jobs_in_flight) == var.tenant_max_jobs_in_flight
    error_message = "tenant_max_jobs_in_flight must be a whole number from 1 to 100000000."
  }
}

variable "tenant_max_running" {
  description = "TASKLEASE_MAX_RUNNING_PER_TENANT: a tenant's jobs leased or running at once (the claim's cap; per tenant: tasklease limits set --max-running)."
  type        = number
  default     = 100

  validation {
    condition     = var.tenant_max_running >= 1 && var.tenant_max_running <= 1000000 && floor(var.tenant_max_running) == var.tenant_max_running
    error_message = "tenant_max_running must be a whole number from 1 to 1000000."
  }
}

variable "tenant_queue_window_per_slot" {
  description = "TASKLEASE_QUEUE_WINDOW_PER_SLOT: a tenant's jobs with a message or a lease, in units of its running cap; past it, jobs are parked until its leases end."
  type        = number
  default     = 2

  validation {
    condition     = var.tenant_queue_window_per_slot >= 1 && var.tenant_queue_window_per_slot <= 1000 && floor(var.tenant_queue_window_per_slot) == var.tenant_queue_window_per_slot
    error_message = "tenant_queue_window_per_slot must be a whole number from 1 to 1000."
  }
}

variable "api_max_body_bytes" {
  description = "TASKLEASE_MAX_BODY_BYTES: larger request bodies get 413 before they are parsed. Above ~6 MB Lambda's synchronous invocation limit refuses the request first."
  type        = number
  default     = 262144

  validation {
    condition     = var.api_max_body_bytes >= 1024 && var.api_max_body_bytes <= 10485760 && floor(var.api_max_body_bytes) == var.api_max_body_bytes
    error_message = "api_max_body_bytes must be a whole number from 1024 to 10485760 (API Gateway's 10 MB payload quota)."
  }
}

variable "api_throttle_rate_limit" {
  description = "Steady requests per second the HTTP API stage lets through; bounds API function concurrency and so database connections."
  type        = number
  default     = 50

  validation {
    condition     = var.api_throttle_rate_limit >= 1
    error_message = "api_throttle_rate_limit must be at least 1."
  }
}

variable "api_throttle_burst_limit" {
  description = "Burst of requests the HTTP API stage lets through."
  type        = number
  default     = 100

  validation {
    condition     = var.api_throttle_burst_limit >= 1
    error_message = "api_throttle_burst_limit must be at least 1."
  }
}

# --- database ------------------------------------------------------------------------

variable "db_instance_class" {
  description = "RDS instance class."
  type        = string
  default     = "db.t4g.micro"

  validation {
    condition     = can(regex("^db\\.", var.db_instance_class))
    error_message = "db_instance_class must start with db. (e.g. db.t4g.micro)."
  }
}

variable "db_engine_version" {
  description = "PostgreSQL major version (RDS picks the newest minor and upgrades minors automatically)."
  type        = string
  default     = "16"

  validation {
    condition     = can(regex("^1[4-9]$", var.db_engine_version))
    error_message = "db_engine_version must be a PostgreSQL major version from 14 to 19, e.g. 16."
  }
}

variable "db_allocated_storage_gb" {
  description = "Initial storage of the database, in GiB."
  type        = number
  default     = 20

  validation {
    condition     = var.db_allocated_storage_gb >= 20 && var.db_allocated_storage_gb <= 65536
    error_message = "db_allocated_storage_gb must be from 20 to 65536."
  }
}

variable "db_max_allocated_storage_gb" {
  description = "Storage autoscaling ceiling, in GiB (must be above db_allocated_storage_gb)."
  type        = number
  default     = 100

  validation {
    condition     = var.db_max_allocated_storage_gb >= 20 && var.db_max_allocated_storage_gb <= 65536
    error_message = "db_max_allocated_storage_gb must be from 20 to 65536."
  }
}

variable "db_name" {
  description = "Name of the database the app uses."
  type        = string
  default     = "tasklease"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_]{0,62}$", var.db_name))
    error_message = "db_name must start with a letter and hold at most 63 lower-case letters, digits and underscores."
  }
}

variable "db_username" {
  description = "Master user name; RDS generates the password and keeps it in Secrets Manager."
  type        = string
  default     = "tasklease"

  validation {
    condition     = can(regex("^[a-z][a-z0-9_]{0,62}$", var.db_username)) && !contains(["postgres", "rdsadmin", "admin"], var.db_username)
    error_message = "db_username must be a lower-case identifier of at most 63 characters and not a reserved name (postgres, rdsadmin, admin)."
  }
}

variable "db_multi_az" {
  description = "Run the database as a Multi-AZ deployment (doubles its cost). Null takes the deployment_profile's (small false, production true)."
  type        = bool
  default     = null
}

variable "db_deletion_protection" {
  description = "Refuse to delete the database (turn off before `terraform destroy`)."
  type        = bool
  default     = true
}

variable "db_backup_retention_days" {
  description = "Days of automated backups."
  type        = number
  default     = 7

  validation {
    condition     = var.db_backup_retention_days >= 1 && var.db_backup_retention_days <= 35
    error_message = "db_backup_retention_days must be from 1 to 35."
  }
}

# --- alarms --------------------------------------------------------------------------

variable "alarm_actions" {
  description = "ARNs (e.g. SNS topics) notified when an alarm fires or clears."
  type        = list(string)
  default     = []
}

variable "oldest_message_alarm_seconds" {
  description = "Alarm when the source queue's oldest message is older than this. A running job's message stays on the queue while it heartbeats, so set this above the longest job."
  type        = number
  default     = 3600

  validation {
    condition     = var.oldest_message_alarm_seconds >= 60
    error_message = "oldest_message_alarm_seconds must be at least 60."
  }
}

# --- retention (docs/explain/design.md#retention): the sweeper prunes finished jobs past these -------

variable "retain_succeeded_seconds" {
  description = "TASKLEASE_RETAIN_SUCCEEDED_SECONDS: how long a succeeded job is kept after it finished, with its events, effects, output, outbox rows and callbacks (0: forever)."
  type        = number
  default     = 2592000

  validation {
    condition     = var.retain_succeeded_seconds >= 0 && var.retain_succeeded_seconds <= 315360000 && floor(var.retain_succeeded_seconds) == var.retain_succeeded_seconds
    error_message = "retain_succeeded_seconds must be a whole number from 0 to 315360000."
  }
}

variable "retain_cancelled_seconds" {
  description = "TASKLEASE_RETAIN_CANCELLED_SECONDS: how long a cancelled job is kept after it finished (0: forever)."
  type        = number
  default     = 2592000

  validation {
    condition     = var.retain_cancelled_seconds >= 0 && var.retain_cancelled_seconds <= 315360000 && floor(var.retain_cancelled_seconds) == var.retain_cancelled_seconds
    error_message = "retain_cancelled_seconds must be a whole number from 0 to 315360000."
  }
}

variable "retain_dead_lettered_seconds" {
  description = "TASKLEASE_RETAIN_DEAD_LETTERED_SECONDS: how long a dead-lettered job is kept unless redriven (0: forever); at least the DLQ's message retention, or the sweeper refuses to start."
  type        = number
  default     = 2592000

  validation {
    condition     = var.retain_dead_lettered_seconds >= 0 && var.retain_dead_lettered_seconds <= 315360000 && floor(var.retain_dead_lettered_seconds) == var.retain_dead_lettered_seconds
    error_message = "retain_dead_lettered_seconds must be a whole number from 0 to 315360000."
  }
}

variable "idempotency_window_seconds" {
  description = "TASKLEASE_IDEMPOTENCY_WINDOW_SECONDS: a job with an Idempotency-Key is kept at least this long after it was made, so a replay within it answers that job."
  type        = number
  default     = 86400

  validation {
    condition     = var.idempotency_window_seconds >= 0 && var.idempotency_window_seconds <= 315360000 && floor(var.idempotency_window_seconds) == var.idempotency_window_seconds
    error_message = "idempotency_window_seconds must be a whole number from 0 to 315360000."
  }
}

variable "prune_batch_size" {
  description = "TASKLEASE_PRUNE_BATCH_SIZE: jobs one prune statement deletes at most, with their rows."
  type        = number
  default     = 500

  validation {
    condition     = var.prune_batch_size >= 1 && var.prune_batch_size <= 10000 && floor(var.prune_batch_size) == var.prune_batch_size
    error_message = "prune_batch_size must be a whole number from 1 to 10000."
  }
}

variable "prune_batches_per_sweep" {
  description = "TASKLEASE_PRUNE_BATCHES_PER_SWEEP: prune batches of each state the sweeper runs per pass (0: it never prunes)."
  type        = number
  default     = 10

  validation {
    condition     = var.prune_batches_per_sweep >= 0 && var.prune_batches_per_sweep <= 10000 && floor(var.prune_batches_per_sweep) == var.prune_batches_per_sweep
    error_message = "prune_batches_per_sweep must be a whole number from 0 to 10000."
  }
}

variable "enable_alert_event_bus" {
  description = "Put every alert on an EventBridge bus (<name>-alerts) from the sweeper; without enable_nat_gateway this adds an EventBridge interface endpoint (billed by the hour)."
  type        = bool
  default     = false
}

variable "alert_dlq_threshold" {
  description = "TASKLEASE_ALERT_DLQ_THRESHOLD: alert once when the dead-lettered jobs reach this many; null: no such alert."
  type        = number
  default     = null

  validation {
    condition     = var.alert_dlq_threshold == null ? true : var.alert_dlq_threshold >= 1
    error_message = "alert_dlq_threshold must be at least 1 (or null)."
  }
}

variable "alert_oldest_queued_seconds" {
  description = "TASKLEASE_ALERT_OLDEST_QUEUED_SECONDS: alert once when the oldest queued job is older than this; null: no such alert."
  type        = number
  default     = null

  validation {
    condition     = var.alert_oldest_queued_seconds == null ? true : (var.alert_oldest_queued_seconds >= 1 && var.alert_oldest_queued_seconds <= 31622400)
    error_message = "alert_oldest_queued_seconds must be from 1 to 31622400 (366 days), or null."
  }
}
