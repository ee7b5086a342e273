-- Every request a unique artifact.pushed (binary CloudEvent): a new version each time, named
-- by its content already, as the ingress hands it to `register` in the cluster. Posted to the
-- path of the URL wrk is given (a functions-framework target: /; modelhooks serve:
-- /functions/register).
local counter = 0
local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end
function request()
  counter = counter + 1
  local n = tid * 100000000 + counter
  local body = string.format('{"model":"bench","version":"%d","uri":"gs://models/models/bench/%d/","digest":"content-sha256:%064x","store":"gcs"}', n, n, n)
  local headers = {
    ["Content-Type"] = "application/json",
    ["ce-specversion"] = "1.0",
    ["ce-id"] = "bench-" .. n,
    ["ce-source"] = "/bench",
    ["ce-type"] = "dev.modelhooks.artifact.pushed",
  }
  return wrk.format("POST", nil, headers, body)  -- nil: the path of the URL wrk was given
end
