# modelhooks on Google Cloud: one Cloud Run function per modelhooks function, each with its
# own service account and dead-letter topic; GCS finalize events (Eventarc) and Artifact
# Registry notifications (Pub/Sub push, OIDC) deliver to register and, through their own
# trigger and subscription, to sign. See README.md.

locals {
  eventarc_location = var.eventarc_location != "" ? var.eventarc_location : var.region
  pubsub_agent      = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"

  # the functions the models bucket's finalize events (Eventarc) and the gcr topic (Pub/Sub
  # push) deliver to: one trigger, one subscription and their invoker bindings each. prune
  # gets the schedules (below); cleanup and notify are deployed with no trigger and no
  # invoker: their events come from Kubernetes Models (README.md, What reaches each function)
  delivered = toset(["register", "sign"])

  # where registrations go: the Kubeflow Model Registry when registry_url is set
  # (for-expressions with a condition, not `cond ? {} : {…}`, whose branch types differ)
  registry_env = {
    for name, value in {
      MODELHOOKS_REGISTRY_BACKEND = "kubeflow"
      MODELHOOKS_REGISTRY_URL     = var.registry_url
    } : name => value if var.registry_url != ""
  }
  registry_token_readers = {
    for name, fn in var.functions : name => fn if var.registry_token_secret != ""
  }

  # the settings each function reads from Secret Manager (latest version), by variable: the
  # registry's token for every function, transfer's MODEL_SYNC_* credentials for transfer only
  secret_env = {
    for name, fn in var.functions : name => merge(
      { for key, secret in { MODELHOOKS_REGISTRY_TOKEN = var.registry_token_secret } : key => secret if secret != "" },
      name == "transfer" ? var.transfer_secrets : {},
    )
  }
  transfer_secret_readers = toset([
    for secret in values(var.transfer_secrets) : secret if contains(keys(var.functions), "transfer")
  ])

  # sign's key: the secret mounted as a file (MODELHOOKS_SIGNING_KEY is a path), sign only
  signing_key_dir = "/etc/modelhooks/signing"
  signing_env = {
    for name, fn in var.functions : name => {
      MODELHOOKS_SIGNING_KEY = "${local.signing_key_dir}/private-key.pem"
    } if name == "sign" && var.signing_key_secret != ""
  }

  # (function, role) pairs for the per-function roles on the models bucket
  function_models_roles = {
    for pair in flatten([
      for name, fn in var.functions : [for role in fn.models_bucket_roles : { name = name, role = role }]
    ]) : "${pair.name}/${pair.role}" => pair
  }

  # (function, role) pairs for the per-function project roles
  function_project_roles = {
    for pair in flatten([
      for name, fn in var.functions : [for role in fn.project_roles : { name = name, role = role }]
    ]) : "${pair.name}/${pair.role}" => pair
  }
}

data "google_project" "this" {}

data "google_storage_project_service_account" "gcs" {}

resource "google_project_service" "apis" {
  for_each = toset([
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudfunctions.googleapis.com",
    "eventarc.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ])
  service            = each.value
  disable_on_destroy = false
}

# ---------------------------------------------------------------------------------------
# Identities: one service account per function, one for Eventarc, one for Pub/Sub push.

resource "google_service_account" "function" {
  for_each     = var.functions
  account_id   = "${var.name_prefix}-${each.key}"
  display_name = "modelhooks ${each.key} function"
}

resource "google_service_account" "eventarc" {
  account_id   = "${var.name_prefix}-eventarc"
  display_name = "modelhooks Eventarc trigger (invokes register)"
}

resource "google_service_account" "push" {
  account_id   = "${var.name_prefix}-push"
  display_name = "modelhooks Pub/Sub push (OIDC identity of the gcr subscription)"
}

# ---------------------------------------------------------------------------------------
# Topics: canonical replies, and one dead-letter topic (with a pull subscription that keeps
# the messages for `modelhooks replay`) per function.

resource "google_pubsub_topic" "events" {
  name       = "${var.name_prefix}-events"
  depends_on = [google_project_service.apis]
}

resource "google_pubsub_topic" "dead_letter" {
  for_each   = var.functions
  name       = "${var.name_prefix}-${each.key}-dead-letter"
  depends_on = [google_project_service.apis]
}

resource "google_pubsub_subscription" "dead_letter" {
  for_each                   = var.functions
  name                       = "${var.name_prefix}-${each.key}-dead-letter"
  topic                      = google_pubsub_topic.dead_letter[each.key].id
  message_retention_duration = var.dead_letter_retention
  retain_acked_messages      = true
  ack_deadline_seconds       = 60

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_topic" "gcr" {
  count      = var.create_gcr_topic ? 1 : 0
  name       = var.gcr_topic
  depends_on = [google_project_service.apis]
}

# ---------------------------------------------------------------------------------------
# The functions: functions-framework target = the function's name (modelhooks.main), built
# from its own source folder (`make sources`: main.py, requirements.txt with the extras that
# function imports, the modelhooks wheel), zipped and uploaded under a content-derived name.

data "archive_file" "source" {
  for_each    = var.functions
  type        = "zip"
  source_dir  = "${var.sources_dir}/${each.key}"
  output_path = "${path.module}/.terraform/sources/${each.key}.zip"
}

resource "google_storage_bucket_object" "source" {
  for_each = var.functions
  bucket   = var.source_bucket
  name     = "${var.name_prefix}-${each.key}-${data.archive_file.source[each.key].output_md5}.zip"
  source   = data.archive_file.source[each.key].output_path
}

resource "google_cloudfunctions2_function" "function" {
  for_each    = var.functions
  name        = "${var.name_prefix}-${each.key}"
  location    = var.region
  description = "modelhooks ${each.key}"

  build_config {
    runtime     = "python311"
    entry_point = each.key
    source {
      storage_source {
        bucket = var.source_bucket
        object = google_storage_bucket_object.source[each.key].name
      }
    }
  }

  service_config {
    service_account_email          = google_service_account.function[each.key].email
    available_memory               = each.value.memory
    timeout_seconds                = each.value.timeout_seconds
    min_instance_count             = each.value.min_instances
    max_instance_count             = each.value.max_instances
    ingress_settings               = var.ingress_settings
    all_traffic_on_latest_revision = true
    environment_variables          = merge(var.settings, local.registry_env, lookup(local.signing_env, each.key, {}), each.value.env)

    dynamic "secret_environment_variables" {
      for_each = local.secret_env[each.key]
      content {
        key        = secret_environment_variables.key
        project_id = var.project_id
        secret     = secret_environment_variables.value
        version    = "latest"
      }
    }

    # sign only: its private key as a read-only file
    dynamic "secret_volumes" {
      for_each = contains(keys(local.signing_env), each.key) ? [var.signing_key_secret] : []
      content {
        mount_path = local.signing_key_dir
        project_id = var.project_id
        secret     = secret_volumes.value
        versions {
          version = "latest"
          path    = "private-key.pem"
        }
      }
    }
  }

  depends_on = [
    google_project_service.apis,
    google_secret_manager_secret_iam_member.registry_token,
    google_secret_manager_secret_iam_member.signing_key,
    google_secret_manager_secret_iam_member.transfer_secret,
  ]
}

# ---------------------------------------------------------------------------------------
# register and sign ← GCS and Artifact Registry: each function in local.delivered gets its own
# Eventarc trigger and its own gcr push subscription (each gets every message). A model counts
# as pushed when its ready marker is finalized. Until register has registered the version sign
# answers 503, and Eventarc / Pub/Sub redeliver with backoff. sign's own writes (model.sig) are
# not ready markers: they make no event. A delivery outlives the 600 s ack deadline of both
# paths only for the largest models (sign's timeout is 900 s); the redelivery then finds the
# signature already recorded, or the conditional write refuses a second one.

resource "google_eventarc_trigger" "models_finalized" {
  for_each        = local.delivered
  name            = "${var.name_prefix}-${each.key}-models-finalized"
  location        = local.eventarc_location
  service_account = google_service_account.eventarc.email

  matching_criteria {
    attribute = "type"
    value     = "google.cloud.storage.object.v1.finalized"
  }
  matching_criteria {
    attribute = "bucket"
    value     = var.models_bucket
  }

  destination {
    cloud_run_service {
      service = google_cloudfunctions2_function.function[each.key].service_config[0].service
      region  = var.region
    }
  }

  depends_on = [
    google_project_iam_member.eventarc_receiver,
    google_project_iam_member.gcs_publishes_events,
    google_cloud_run_v2_service_iam_member.eventarc_invokes,
  ]
}

# The gcr topic, pushed with an OIDC token; after max_delivery_attempts a message goes to the
# function's own dead-letter topic.

resource "google_pubsub_subscription" "gcr" {
  for_each             = local.delivered
  name                 = "${var.name_prefix}-${each.key}-gcr"
  topic                = var.create_gcr_topic ? google_pubsub_topic.gcr[0].id : "projects/${var.project_id}/topics/${var.gcr_topic}"
  ack_deadline_seconds = min(600, var.functions[each.key].timeout_seconds)

  push_config {
    push_endpoint = google_cloudfunctions2_function.function[each.key].url
    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = var.push_audience != "" ? var.push_audience : google_cloudfunctions2_function.function[each.key].url
    }
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter[each.key].id
    max_delivery_attempts = var.max_delivery_attempts
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.push_invokes,
    google_service_account_iam_member.pubsub_mints_push_tokens,
  ]
}

# ---------------------------------------------------------------------------------------
# IAM, least privilege.

# Eventarc's identity receives events and invokes the functions in local.delivered; with the
# push identity they are the only invokers.
resource "google_project_iam_member" "eventarc_receiver" {
  project = var.project_id
  role    = "roles/eventarc.eventReceiver"
  member  = google_service_account.eventarc.member
}

resource "google_cloud_run_v2_service_iam_member" "eventarc_invokes" {
  for_each = local.delivered
  location = var.region
  name     = google_cloudfunctions2_function.function[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.eventarc.member
}

resource "google_cloud_run_v2_service_iam_member" "push_invokes" {
  for_each = local.delivered
  location = var.region
  name     = google_cloudfunctions2_function.function[each.key].service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.push.member
}

# Cloud Storage's service agent publishes the bucket's events for Eventarc.
resource "google_project_iam_member" "gcs_publishes_events" {
  project = var.project_id
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${data.google_storage_project_service_account.gcs.email_address}"
}

# Pub/Sub's service agent mints the push OIDC tokens and moves messages to dead-letter
# topics (publish there, and acknowledge on the source subscription).
resource "google_service_account_iam_member" "pubsub_mints_push_tokens" {
  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}

resource "google_pubsub_topic_iam_member" "pubsub_dead_letters" {
  for_each = var.functions
  topic    = google_pubsub_topic.dead_letter[each.key].id
  role     = "roles/pubsub.publisher"
  member   = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "pubsub_acks_gcr" {
  for_each     = local.delivered
  subscription = google_pubsub_subscription.gcr[each.key].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

# Each function gets its models_bucket_roles on the models bucket (objectViewer unless it
# says otherwise; sign also objectCreator) and publishes its canonical replies.
resource "google_storage_bucket_iam_member" "function_models" {
  for_each = local.function_models_roles
  bucket   = var.models_bucket
  role     = each.value.role
  member   = google_service_account.function[each.value.name].member
}

resource "google_pubsub_topic_iam_member" "function_replies" {
  for_each = var.functions
  topic    = google_pubsub_topic.events.id
  role     = "roles/pubsub.publisher"
  member   = google_service_account.function[each.key].member
}

resource "google_project_iam_member" "function_roles" {
  for_each = local.function_project_roles
  project  = var.project_id
  role     = each.value.role
  member   = google_service_account.function[each.value.name].member
}

resource "google_secret_manager_secret_iam_member" "registry_token" {
  for_each  = local.registry_token_readers
  project   = var.project_id
  secret_id = var.registry_token_secret
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.function[each.key].member
}

# sign's private key: readable by sign's account only.
resource "google_secret_manager_secret_iam_member" "signing_key" {
  for_each  = local.signing_env
  project   = var.project_id
  secret_id = var.signing_key_secret
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.function[each.key].member
}

# transfer's MODEL_SYNC_* credentials: readable by transfer's account only.
resource "google_secret_manager_secret_iam_member" "transfer_secret" {
  for_each  = local.transfer_secret_readers
  project   = var.project_id
  secret_id = each.key
  role      = "roles/secretmanager.secretAccessor"
  member    = google_service_account.function["transfer"].member
}

# ---------------------------------------------------------------------------------------
# State moves: the per-function copies became for_each instances (nothing is recreated).

moved {
  from = google_eventarc_trigger.models_finalized
  to   = google_eventarc_trigger.models_finalized["register"]
}

moved {
  from = google_eventarc_trigger.models_finalized_sign
  to   = google_eventarc_trigger.models_finalized["sign"]
}

moved {
  from = google_pubsub_subscription.gcr_register
  to   = google_pubsub_subscription.gcr["register"]
}

moved {
  from = google_pubsub_subscription.gcr_sign
  to   = google_pubsub_subscription.gcr["sign"]
}

moved {
  from = google_cloud_run_v2_service_iam_member.eventarc_invokes_register
  to   = google_cloud_run_v2_service_iam_member.eventarc_invokes["register"]
}

moved {
  from = google_cloud_run_v2_service_iam_member.eventarc_invokes_sign
  to   = google_cloud_run_v2_service_iam_member.eventarc_invokes["sign"]
}

moved {
  from = google_cloud_run_v2_service_iam_member.push_invokes_register
  to   = google_cloud_run_v2_service_iam_member.push_invokes["register"]
}

moved {
  from = google_cloud_run_v2_service_iam_member.push_invokes_sign
  to   = google_cloud_run_v2_service_iam_member.push_invokes["sign"]
}

moved {
  from = google_pubsub_subscription_iam_member.pubsub_acks_gcr_register
  to   = google_pubsub_subscription_iam_member.pubsub_acks_gcr["register"]
}

moved {
  from = google_pubsub_subscription_iam_member.pubsub_acks_gcr_sign
  to   = google_pubsub_subscription_iam_member.pubsub_acks_gcr["sign"]
}

# ---------------------------------------------------------------------------------------
# prune on a schedule: one Cloud Scheduler job per repository in var.prune_schedules publishes
# a canonical `dev.modelhooks.prune.requested` CloudEvent (Pub/Sub attributes; the message id
# is the event id, so each run is its own delivery) to one topic, pushed to prune.

resource "google_pubsub_topic" "prune_schedule" {
  count      = length(var.prune_schedules) > 0 ? 1 : 0
  name       = "${var.name_prefix}-prune-schedule"
  depends_on = [google_project_service.apis]
}

resource "google_cloud_scheduler_job" "prune" {
  for_each  = var.prune_schedules
  name      = "${var.name_prefix}-prune-${substr(sha256(each.key), 0, 12)}"
  region    = var.region
  schedule  = each.value
  time_zone = "Etc/UTC"

  pubsub_target {
    topic_name = google_pubsub_topic.prune_schedule[0].id
    data       = base64encode(jsonencode({ uri = each.key }))
    attributes = {
      "ce-specversion" = "1.0"
      "ce-type"        = "dev.modelhooks.prune.requested"
      "ce-source"      = "//cloudscheduler.googleapis.com/projects/${var.project_id}/locations/${var.region}/jobs/${var.name_prefix}-prune-${substr(sha256(each.key), 0, 12)}"
      "content-type"   = "application/json"
    }
  }
}

resource "google_pubsub_subscription" "prune_schedule" {
  count                = length(var.prune_schedules) > 0 ? 1 : 0
  name                 = "${var.name_prefix}-prune-schedule"
  topic                = google_pubsub_topic.prune_schedule[0].id
  ack_deadline_seconds = min(600, var.functions["prune"].timeout_seconds)

  push_config {
    push_endpoint = google_cloudfunctions2_function.function["prune"].url
    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = var.push_audience != "" ? var.push_audience : google_cloudfunctions2_function.function["prune"].url
    }
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter["prune"].id
    max_delivery_attempts = var.max_delivery_attempts
  }

  retry_policy {
    minimum_backoff = "10s"
    maximum_backoff = "600s"
  }

  expiration_policy {
    ttl = ""
  }

  depends_on = [
    google_cloud_run_v2_service_iam_member.prune_schedule_invokes,
    google_service_account_iam_member.pubsub_mints_push_tokens,
  ]
}

resource "google_cloud_run_v2_service_iam_member" "prune_schedule_invokes" {
  count    = length(var.prune_schedules) > 0 ? 1 : 0
  location = var.region
  name     = google_cloudfunctions2_function.function["prune"].service_config[0].service
  role     = "roles/run.invoker"
  member   = google_service_account.push.member
}

resource "google_pubsub_subscription_iam_member" "pubsub_acks_prune_schedule" {
  count        = length(var.prune_schedules) > 0 ? 1 : 0
  subscription = google_pubsub_subscription.prune_schedule[0].id
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}
