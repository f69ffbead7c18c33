//! The OpenAPI document served at `/openapi.json`.

/// OpenAPI 3.0 description of the controller's HTTP API.
pub const DOCUMENT: &str = r##"{
  "openapi": "3.0.3",
  "info": {"title": "Tandem controller API", "version": "1"},
  "paths": {
    "/v1/jobs": {
      "post": {"summary": "Submit a batch job (sbatch). Local callers are identified by Unix-socket peer credentials.",
               "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubmitRequest"}}}},
               "responses": {"200": {"description": "Accepted and durable", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubmitResponse"}}}},
                             "400": {"description": "Malformed or impossible request", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
                             "401": {"description": "No user identity"}}},
      "get": {"summary": "List jobs (squeue)",
              "parameters": [{"name": "user", "in": "query", "schema": {"type": "string"}},
                             {"name": "state", "in": "query", "schema": {"type": "string"}},
                             {"name": "partition", "in": "query", "schema": {"type": "string"}},
                             {"name": "all", "in": "query", "schema": {"type": "boolean"}}],
              "responses": {"200": {"description": "Jobs", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/JobInfo"}}}}}}}
    },
    "/v1/jobs/{id}": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "get": {"summary": "Show a job (scontrol show job)", "responses": {"200": {"description": "Job"}, "404": {"description": "No such job"}}},
      "delete": {"summary": "Cancel a job, or signal it with ?signal=N (scancel)",
                 "parameters": [{"name": "signal", "in": "query", "schema": {"type": "integer"}}],
                 "responses": {"204": {"description": "Done"}, "403": {"description": "Another user's job"}, "409": {"description": "Already finished"}}},
      "post": {"summary": "hold, release, requeue or update (time_limit) a job",
               "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["action"],
                 "properties": {"action": {"type": "string", "enum": ["hold", "release", "requeue", "update"]}, "time_limit": {"type": "integer"}}}}}},
               "responses": {"204": {"description": "Done"}}}
    },
    "/v1/jobs/{id}/steps": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}],
      "post": {"summary": "Launch a job step inside the allocation (srun)",
               "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["argv"],
                 "properties": {"nodes": {"type": "integer"}, "ntasks": {"type": "integer"}, "ntasks_per_node": {"type": "integer"}, "argv": {"type": "array", "items": {"type": "string"}}}}}}},
               "responses": {"200": {"description": "Step id"}}}
    },
    "/v1/nodes": {"get": {"summary": "List nodes (sinfo)", "responses": {"200": {"description": "Nodes"}}}},
    "/v1/nodes/{name}": {"post": {"summary": "Drain or resume a node (root)",
        "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"type": "object", "required": ["state"], "properties": {"state": {"type": "string", "enum": ["drain", "resume"]}, "reason": {"type": "string"}}}}}},
        "responses": {"204": {"description": "Done"}}}},
    "/v1/history": {"get": {"summary": "Accounting (sacct)", "parameters": [{"name": "user", "in": "query", "schema": {"type": "string"}}, {"name": "since", "in": "query", "schema": {"type": "integer"}}], "responses": {"200": {"description": "Jobs"}}}},
    "/v1/priority": {"get": {"summary": "Per-factor priority of pending jobs (sprio)", "responses": {"200": {"description": "Breakdowns"}}}},
    "/v1/agent/register": {"post": {"summary": "Node agent registration (X-Tandem-Secret header)", "responses": {"200": {"description": "Lease and heartbeat interval"}}}},
    "/v1/agent/heartbeat": {"post": {"summary": "Node agent heartbeat: renews the lease, reports tasks, long-polls for orders", "responses": {"200": {"description": "Orders"}}}},
    "/v1/services": {
      "post": {"summary": "Create or update a service (tandem service apply): body {spec, cwd}; unknown spec keys are refused",
               "responses": {"200": {"description": "{name, revision, changed}"}, "400": {"description": "Invalid spec", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}, "403": {"description": "Another user's service"}}},
      "get": {"summary": "List services", "responses": {"200": {"description": "Services with replicas, revisions, replica count over time and proxy figures"}}}
    },
    "/v1/services/{name}": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "get": {"summary": "Show a service", "responses": {"200": {"description": "Service"}, "404": {"description": "No such service"}}},
      "delete": {"summary": "Delete a service: replicas drain, then stop", "responses": {"204": {"description": "Deleting"}}},
      "post": {"summary": "Scale ({\"action\": \"scale\", \"replicas\": N}) or undo a rollout ({\"action\": \"undo\", \"revision\": N|null})",
               "responses": {"200": {"description": "{name, revision}"}, "409": {"description": "No such revision, or being deleted"}}}
    },
    "/v1/proxy/sync": {"post": {"summary": "Proxy long poll (X-Tandem-Secret header): reports in-flight requests per service and replica, answers with the endpoint view when newer than `since` or after `wait_ms`", "responses": {"200": {"description": "{version, services: [{name, balance, hold_ms, retries, endpoints: [{replica, addr, node}], draining}], changed_ms}"}}}},
    "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {"description": "text/plain exposition"}}}}
  },
  "components": {"schemas": {
    "SubmitRequest": {"type": "object", "required": ["batch", "cwd", "host", "env"], "properties": {
      "batch": {"type": "object", "description": "Parsed sbatch options and the script text"},
      "cwd": {"type": "string"}, "host": {"type": "string"},
      "env": {"type": "array", "items": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 2}}}},
    "SubmitResponse": {"type": "object", "properties": {"job_ids": {"type": "array", "items": {"type": "integer"}}, "test_only": {"type": "string", "nullable": true}}},
    "JobInfo": {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "user": {"type": "string"}, "state": {"type": "string"}, "reason": {"type": "string"}, "nodelist": {"type": "string"}}},
    "Error": {"type": "object", "properties": {"error": {"type": "string"}}}
  }}
}"##;
