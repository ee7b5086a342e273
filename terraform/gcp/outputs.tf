output "function_urls" {
  description = "HTTPS endpoint of each function (callers need roles/run.invoker)."
  value       = { for name, fn in google_cloudfunctions2_function.function : name => fn.url }
}

output "function_service_accounts" {
  description = "The service account each function runs as."
  value       = { for name, sa in google_service_account.function : name => sa.email }
}

output "events_topic" {
  description = "Topic of the canonical reply events (dev.modelhooks.*)."
  value       = google_pubsub_topic.events.id
}

output "dead_letter_topics" {
  description = "Each function's dead-letter topic."
  value       = { for name, topic in google_pubsub_topic.dead_letter : name => topic.id }
}

output "dead_letter_subscriptions" {
  description = "Pull subscriptions keeping each function's dead letters, for `modelhooks replay`."
  value       = { for name, sub in google_pubsub_subscription.dead_letter : name => sub.id }
}

output "gcr_subscription" {
  description = "The push subscription delivering Artifact Registry notifications to register."
  value       = google_pubsub_subscription.gcr["register"].id
}

output "eventarc_trigger" {
  description = "The Eventarc trigger delivering the models bucket's finalized objects to register."
  value       = google_eventarc_trigger.models_finalized["register"].id
}

output "gcr_subscriptions" {
  description = "The push subscriptions delivering Artifact Registry notifications, by function (register, sign)."
  value       = { for name, sub in google_pubsub_subscription.gcr : name => sub.id }
}

output "eventarc_triggers" {
  description = "The Eventarc triggers delivering the models bucket's finalized objects, by function (register, sign)."
  value       = { for name, trigger in google_eventarc_trigger.models_finalized : name => trigger.id }
}
