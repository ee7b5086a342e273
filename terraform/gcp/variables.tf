variable "project_id" {
  description = "Google Cloud project that hosts the functions, topics and the models bucket."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Run functions (and of the Eventarc trigger unless eventarc_location is set)."
  type        = string
  default     = "us-central1"
}

variable "name_prefix" {
  description = "Prefix of every resource name: <prefix>-<function>, <prefix>-events, …"
  type        = string
  default     = "modelhooks"

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{1,14}$", var.name_prefix))
    error_message = "name_prefix: 2-15 lowercase letters, digits or dashes (service account ids are at most 30 characters)."
  }
}

variable "source_bucket" {
  description = "GCS bucket the functions' source archives are uploaded to (one per function, named by content: a change redeploys that function only)."
  type        = string
}

variable "sources_dir" {
  description = "Directory holding one Cloud Run source folder per function (main.py, requirements.txt, the modelhooks wheel), as `make sources` writes them."
  type        = string
  default     = "../../build/functions"
}

variable "models_bucket" {
  description = "Bucket the models are pushed to: google.cloud.storage.object.v1.finalized events from it reach register and sign."
  type        = string
}

variable "eventarc_location" {
  description = "Location of the Eventarc trigger: the models bucket's location (a region, or a multi-region such as `us`). Empty = region."
  type        = string
  default     = ""
}

variable "functions" {
  description = <<-EOT
    One Cloud Run function per entry, named like the function modules in functions/handlers/ (the
    key is also the functions-framework target). Per function: memory, timeout_seconds,
    min_instances, max_instances, env (extra environment, over var.settings),
    models_bucket_roles (its roles on the models bucket) and project_roles (extra project
    roles, least privilege).
  EOT
  type = map(object({
    memory              = optional(string, "512M")
    timeout_seconds     = optional(number, 300)
    min_instances       = optional(number, 0)
    max_instances       = optional(number, 10)
    env                 = optional(map(string), {})
    models_bucket_roles = optional(list(string), ["roles/storage.objectViewer"])
    project_roles       = optional(list(string), [])
  }))
  default = {
    register = {
      project_roles = ["roles/artifactregistry.reader"]
    }
    # sign streams the whole model through a hash: more memory and time than register.
    # On the models bucket it lists and reads (objectViewer) and creates <prefix>/model.sig
    # (objectCreator: storage.objects.create, enough for its conditional write, which never
    # overwrites). objectCreator alone cannot read, and objectUser / objectAdmin would add
    # delete and update, which sign never needs. In Artifact Registry it reads the model and
    # pushes the signature as a referrer manifest: artifactregistry.writer (push, no delete);
    # bind it on the model repositories instead of the project where you can.
    sign = {
      memory              = "2G"
      timeout_seconds     = 900
      models_bucket_roles = ["roles/storage.objectViewer", "roles/storage.objectCreator"]
      project_roles       = ["roles/artifactregistry.writer"]
    }
    # prune deletes tags in Artifact Registry (artifactregistry.repoAdmin: tag delete; bind
    # it on the model repositories instead of the project where you can). It reads no bucket.
    prune = {
      models_bucket_roles = []
      project_roles       = ["roles/artifactregistry.repoAdmin"]
    }
    # cleanup is the one function that deletes data: it lists and deletes the objects of a
    # deleted model version (objectUser: list, read, delete; no bucket administration) and
    # deletes manifests and tags in Artifact Registry (repoAdmin; bind it on the model
    # repositories instead of the project where you can).
    cleanup = {
      models_bucket_roles = ["roles/storage.objectUser"]
      project_roles       = ["roles/artifactregistry.repoAdmin"]
    }
    # transfer copies a model between stores on a transfer.requested, then registers it: on
    # the models bucket it lists and reads a source and creates a destination's objects
    # (objectViewer + objectCreator: resumable uploads and conditional writes, no delete), in
    # Artifact Registry it reads and pushes (artifactregistry.writer, no delete). Long: the
    # copy stops at MODELHOOKS_TRANSFER_TIMEOUT, before Cloud Run's timeout cuts the request
    # (then 503: Pub/Sub redelivers and the copy resumes). Other stores' credentials are its
    # MODEL_SYNC_* settings: secrets from var.transfer_secrets, the rest (endpoints, regions)
    # in env.
    transfer = {
      memory              = "1G"
      timeout_seconds     = 3600
      env                 = { MODELHOOKS_TRANSFER_TIMEOUT = "3300" }
      models_bucket_roles = ["roles/storage.objectViewer", "roles/storage.objectCreator"]
      project_roles       = ["roles/artifactregistry.writer"]
    }
    # notify writes Model status, finalizers and Events on a Kubernetes cluster (GKE): it
    # reads no bucket and no registry; its cluster access is Kubernetes RBAC through a
    # kubeconfig (MODELHOOKS_NOTIFY_KUBECONFIG), not a project role.
    notify = {
      memory              = "256M"
      timeout_seconds     = 60
      models_bucket_roles = []
    }
    # admission answers a GKE cluster's AdmissionReviews (the webhooks' clientConfig.url is
    # the function's URL + /validate or /mutate): it reads model manifests and their signature
    # referrers (artifactregistry.reader) and never hashes a model, so little memory and a
    # timeout under the webhooks' 10 s. Its policies come from the cluster (Kubernetes RBAC via
    # MODELHOOKS_ADMISSION_KUBECONFIG), not a project role. One warm instance: a cold start
    # would eat into the apiserver's deadline.
    admission = {
      memory          = "512M"
      timeout_seconds = 10
      min_instances   = 1
      project_roles   = ["roles/artifactregistry.reader"]
    }
  }

  validation {
    condition     = contains(keys(var.functions), "register") && contains(keys(var.functions), "sign")
    error_message = "functions must include register and sign: the Eventarc triggers and the gcr subscriptions deliver to them."
  }
}

variable "settings" {
  description = "Environment of every function: modelhooks settings by their variables (`modelhooks settings --markdown`). The registry ones come from registry_url / registry_token_secret."
  type        = map(string)
  default = {
    MODELHOOKS_LOG_LEVEL      = "INFO"
    MODELHOOKS_HOME           = "/tmp/modelhooks"
    MODELHOOKS_STORE_BACKEND  = "cloud"
    MODELHOOKS_LAYOUT_PATTERN = "models/{name}/{version}/"
    MODELHOOKS_LAYOUT_MARKER  = "_SUCCESS"
  }
}

variable "registry_url" {
  description = "Kubeflow Model Registry base URL the functions register into (reachable from Cloud Run). Empty = sqlite under MODELHOOKS_HOME, per instance and lost with it: for trials only."
  type        = string
  default     = ""
}

variable "registry_token_secret" {
  description = "Secret Manager secret id holding the registry's bearer token (MODELHOOKS_REGISTRY_TOKEN, latest version). Empty = no token."
  type        = string
  default     = ""
}

variable "signing_key_secret" {
  description = "Secret Manager secret id holding sign's EC private key PEM (latest version), mounted as a file for MODELHOOKS_SIGNING_KEY; only sign's account may read it. Empty = no key mounted: sign then follows its env in var.functions (by the enabling rule, off unless something turns it on)."
  type        = string
  default     = ""
}

variable "transfer_secrets" {
  description = "transfer's store credentials from Secret Manager (latest version), as secret environment variables of the transfer function only: MODEL_SYNC_* variable => secret id, e.g. { MODEL_SYNC_SOURCE_AWS_ACCESS_KEY_ID = \"minio-key-id\", MODEL_SYNC_SOURCE_AWS_SECRET_ACCESS_KEY = \"minio-secret\" }; only transfer's account may read them. What is not secret (MODEL_SYNC_*_AWS_ENDPOINT, _AWS_REGION) goes in var.functions.transfer.env; GCS and Artifact Registry need none (the function's account). Empty = none."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for name in keys(var.transfer_secrets) :
      can(regex("^MODEL_SYNC_(SOURCE|DESTINATION)_(AWS_ACCESS_KEY_ID|AWS_SECRET_ACCESS_KEY|OCI_USERNAME|OCI_PASSWORD)$", name))
    ])
    error_message = "transfer_secrets: the keys are MODEL_SYNC_{SOURCE,DESTINATION}_{AWS_ACCESS_KEY_ID,AWS_SECRET_ACCESS_KEY,OCI_USERNAME,OCI_PASSWORD}."
  }
}

variable "ingress_settings" {
  description = "Who may reach the functions: ALLOW_INTERNAL_ONLY (Eventarc and Pub/Sub push of this project count as internal) or ALLOW_ALL. Callers still need roles/run.invoker either way."
  type        = string
  default     = "ALLOW_INTERNAL_ONLY"

  validation {
    condition     = contains(["ALLOW_INTERNAL_ONLY", "ALLOW_INTERNAL_AND_GCLB", "ALLOW_ALL"], var.ingress_settings)
    error_message = "ingress_settings: ALLOW_INTERNAL_ONLY, ALLOW_INTERNAL_AND_GCLB or ALLOW_ALL."
  }
}

variable "gcr_topic" {
  description = "The Pub/Sub topic Artifact Registry publishes Docker/OCI notifications to. It must be named gcr in the project."
  type        = string
  default     = "gcr"
}

variable "create_gcr_topic" {
  description = "Create the gcr topic (false when the project already has it)."
  type        = bool
  default     = true
}

variable "push_audience" {
  description = "Audience of the OIDC token Pub/Sub pushes with. Empty = each subscription's function URL (what Cloud Run checks by default)."
  type        = string
  default     = ""
}

variable "max_delivery_attempts" {
  description = "Pub/Sub deliveries of one message before it goes to the function's dead-letter topic (5-100)."
  type        = number
  default     = 10

  validation {
    condition     = var.max_delivery_attempts >= 5 && var.max_delivery_attempts <= 100
    error_message = "max_delivery_attempts must be between 5 and 100 (a Pub/Sub limit)."
  }
}

variable "dead_letter_retention" {
  description = "How long dead-lettered messages are kept for `modelhooks replay` (a duration in seconds, at most 7 days)."
  type        = string
  default     = "604800s"
}

variable "prune_schedules" {
  description = "Scheduled prune runs: repository (oci://LOCATION-docker.pkg.dev/PROJECT/REPOSITORY/IMAGE) => Cloud Scheduler cron (UTC), e.g. \"0 3 * * *\". prune applies the repository's policy from its MODELHOOKS_PRUNE_POLICY_FILE. Empty = prune runs on pushes only."
  type        = map(string)
  default     = {}

  validation {
    condition     = length(var.prune_schedules) == 0 || contains(keys(var.functions), "prune")
    error_message = "prune_schedules needs a prune entry in var.functions."
  }
  validation {
    condition     = alltrue([for uri in keys(var.prune_schedules) : can(regex("^oci://[a-z0-9][a-z0-9.-]*(:[0-9]+)?/[a-z0-9][a-z0-9._/-]*$", uri))])
    error_message = "prune_schedules: each key is a repository, oci://host/repository (no tag or digest)."
  }
}
