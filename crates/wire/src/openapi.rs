//! The OpenAPI document served at `/openapi.json`: every route of the controller, its
//! parameters, bodies, replies and identities, written by hand. Its tests hold it to the wire
//! types (a sample of each is serialized and checked against its schema, field for field);
//! `server`'s tests hold it to the router (crates/server/tests/openapi.rs), and Schemathesis
//! holds it to a live controller (tests/schemathesis/run.sh).

/// OpenAPI 3.1 description of the controller's HTTP API.
pub const DOCUMENT: &str = r##"{
  "openapi": "3.1.0",
  "info": {
    "title": "Tandem controller API",
    "version": "1",
    "description": "The controller's HTTP/JSON API, served on TCP (`tandem server --listen`; TLS with a certificate from the cluster CA `DATA/ca.pem`, unless the controller runs `--insecure` on loopback) and on the Unix socket `DATA/tandem.sock`. Identity: on the Unix socket the kernel names the caller (SO_PEERCRED) and no credential is read; on TCP a user presents a token (`bearerAuth`, from `POST /v1/token` or `tandem token`), node agents present a credential of their own (`nodeCredential`, got by spending a single-use `joinToken`), and inference proxies theirs (`proxyCredential`). Every error reply is a JSON `Error` object, `{\"error\": \"message\"}`. Integers in bodies are written without a fraction or exponent (`2`, not `2.0`): a whole float is refused as malformed. A 500 means the database could not make a change (or a read's changes) durable."
  },
  "security": [{"bearerAuth": []}],
  "tags": [
    {"name": "jobs", "description": "Batch jobs and steps (sbatch, squeue, scancel, scontrol, srun, sacct, sprio)"},
    {"name": "nodes", "description": "Nodes (sinfo, scontrol update node)"},
    {"name": "services", "description": "Inference services (tandem service ...)"},
    {"name": "accounting", "description": "Associations, accounts, users, QOS and their limits (sacctmgr)"},
    {"name": "cluster", "description": "The agents' and the proxy's side of the API (cluster secret)"},
    {"name": "meta", "description": "Health, metrics, tokens and this document"}
  ],
  "paths": {
    "/healthz": {
      "get": {
        "operationId": "healthz", "tags": ["meta"], "summary": "Whether the controller answers: the one request anyone may make",
        "security": [],
        "responses": {"200": {"description": "`ok` and a newline", "content": {"text/plain": {"schema": {"type": "string", "const": "ok\n"}}}}}
      }
    },
    "/metrics": {
      "get": {
        "operationId": "metrics", "tags": ["meta"],
        "summary": "Prometheus metrics (text exposition 0.0.4). Needs a user identity unless the configuration sets `[security] metrics_open = true`",
        "responses": {
          "200": {"description": "Metrics", "content": {"text/plain": {"schema": {"type": "string"}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      }
    },
    "/openapi.json": {
      "get": {
        "operationId": "openapi", "tags": ["meta"], "summary": "This document",
        "responses": {
          "200": {"description": "OpenAPI 3.1 document", "content": {"application/json": {"schema": {"type": "object", "required": ["openapi", "paths"]}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      }
    },
    "/v1/token": {
      "post": {
        "operationId": "issueToken", "tags": ["meta"],
        "summary": "A signed token for the caller (scontrol token): usually asked for on the Unix socket, then used on TCP",
        "parameters": [{"name": "lifespan", "in": "query", "description": "Seconds the token is valid (default 1800, at most 7 days)", "schema": {"type": "integer", "minimum": 1, "maximum": 604800}}],
        "responses": {
          "200": {"description": "Token", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Token"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      }
    },
    "/v1/join-tokens": {
      "post": {
        "operationId": "joinTokens", "tags": ["cluster"], "summary": "Single-use join tokens, each admitting one new node (`tandem token --join`; root or the controller's user only)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JoinTokensRequest"}}}},
        "responses": {
          "200": {"description": "The tokens", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JoinTokens"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/agent/join": {
      "post": {
        "operationId": "joinNode", "tags": ["cluster"], "summary": "A new node's agent spends a join token on a credential of its own for its node name (answered once the token is durably spent)",
        "security": [{"joinToken": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JoinRequest"}}}},
        "responses": {
          "200": {"description": "The node's credential", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Credential"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/NoCredential"},
          "403": {"description": "The join token was used before", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
          "409": {"description": "The name already has a credential (delete the node first)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/proxy-credentials": {
      "post": {
        "operationId": "proxyCredential", "tags": ["cluster"], "summary": "A credential for an inference proxy (`tandem token --proxy NAME`; root or the controller's user only); one issued before for the name stops working",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ProxyCredentialRequest"}}}},
        "responses": {
          "200": {"description": "The proxy's credential", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Credential"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/agent/register": {
      "post": {
        "operationId": "registerAgent", "tags": ["cluster"], "summary": "A node agent registers (or registers again) its node and address",
        "security": [{"nodeCredential": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RegisterRequest"}}}},
        "responses": {
          "200": {"description": "Lease and heartbeat interval", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RegisterResponse"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/NoCredential"},
          "403": {"$ref": "#/components/responses/OtherNode"},
          "426": {"description": "The agent's release is not one this controller takes (newer than the controller's, or more than one release behind): the error says which to upgrade", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/agent/output/{id}": {
      "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/u64"}}],
      "post": {
        "operationId": "sendOutput", "tags": ["cluster"],
        "summary": "A node agent sends the output an Output order asked for, as it reads it (the body); the controller passes it on to the client that asked and answers once that client has it all or went away",
        "security": [{"nodeCredential": []}],
        "parameters": [
          {"name": "x-tandem-output-key", "in": "header", "required": true, "schema": {"type": "string"}, "description": "The order's key"},
          {"name": "x-tandem-output-failed", "in": "header", "schema": {"type": "string"}, "description": "Present: the body says why the output could not be read"}],
        "requestBody": {"required": true, "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        "responses": {
          "204": {"description": "Passed on"},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/NoCredential"},
          "403": {"$ref": "#/components/responses/OtherNode"},
          "404": {"$ref": "#/components/responses/NotFound"}
        }
      }
    },
    "/v1/jobs/{id}/output": {
      "parameters": [{"$ref": "#/components/parameters/JobId"}],
      "get": {
        "operationId": "jobOutput", "tags": ["jobs"],
        "summary": "A job's (or a service replica's) output and error files as its node reads them, as the job's user; its owner and root only",
        "parameters": [
          {"name": "tail", "in": "query", "schema": {"$ref": "#/components/schemas/u64"}, "description": "Only the last lines of each file"},
          {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 18446744073709551615}, "description": "At most this many bytes (at least 1)"},
          {"name": "follow", "in": "query", "schema": {"type": "boolean"}, "description": "Go on until the job's tasks there have ended"},
          {"name": "node", "in": "query", "schema": {"type": "string"}, "description": "The node (default, or empty: the job's first, where its batch script runs)"}],
        "responses": {
          "200": {"description": "The output, as it comes", "content": {"text/plain": {"schema": {"type": "string"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/agent/heartbeat": {
      "post": {
        "operationId": "heartbeat", "tags": ["cluster"],
        "summary": "A node agent's heartbeat: renews its lease, acknowledges orders, reports running and ended tasks and replicas; long-polls (up to `wait_ms`, at most the heartbeat interval) for new orders",
        "security": [{"nodeCredential": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Heartbeat"}}}},
        "responses": {
          "200": {"description": "Every order not yet acknowledged", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Orders"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/NoCredential"},
          "403": {"$ref": "#/components/responses/OtherNode"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/proxy/sync": {
      "post": {
        "operationId": "proxySync", "tags": ["cluster"],
        "summary": "The inference proxy's report (requests in flight per service and replica) and long poll: answered at once with the endpoint view when it is newer than `since` (or `wait_ms` is 0), else when it changes or `wait_ms` (at most 30 s) passes",
        "security": [{"proxyCredential": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ProxySync"}}}},
        "responses": {
          "200": {"description": "The endpoint view", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/EndpointView"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/NoCredential"}
        }
      }
    },
    "/v1/jobs": {
      "post": {
        "operationId": "submitJob", "tags": ["jobs"], "summary": "Submit a batch job or job array (sbatch); with `batch.test_only`, only check it",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubmitRequest"}}}},
        "responses": {
          "200": {"description": "Accepted and durable (or, with test_only, what would happen)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/SubmitResponse"}}},
                  "links": {
                    "GetJob": {"operationId": "getJob", "parameters": {"id": "$response.body#/job_ids/0"}},
                    "CancelJob": {"operationId": "cancelJob", "parameters": {"id": "$response.body#/job_ids/0"}},
                    "JobAction": {"operationId": "jobAction", "parameters": {"id": "$response.body#/job_ids/0"}},
                    "CreateStep": {"operationId": "createStep", "parameters": {"id": "$response.body#/job_ids/0"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "413": {"description": "The body is over twice max_script_size and 1 MiB (answered while it is still being sent)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "get": {
        "operationId": "listJobs", "tags": ["jobs"], "summary": "List jobs (squeue): pending and running ones, or with `all` finished ones still in memory too",
        "parameters": [
          {"name": "user", "in": "query", "description": "Only these users' (comma-separated names or uids)", "schema": {"type": "string"}},
          {"name": "state", "in": "query", "description": "Comma-separated Slurm state names (PENDING, RUNNING, ...; PD and R), case-insensitive", "schema": {"type": "string"}},
          {"name": "partition", "in": "query", "schema": {"type": "string"}},
          {"name": "all", "in": "query", "description": "Include finished jobs", "schema": {"type": "boolean"}},
          {"name": "collapse", "in": "query", "description": "Pending tasks of an array that wait for the same reason as one row, with array_collapsed", "schema": {"type": "boolean"}}
        ],
        "responses": {
          "200": {"description": "Jobs the caller may see", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/JobInfo"}}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/jobs/{id}": {
      "parameters": [{"$ref": "#/components/parameters/JobId"}],
      "get": {
        "operationId": "getJob", "tags": ["jobs"], "summary": "Show a job (scontrol show job)",
        "responses": {
          "200": {"description": "Job", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobInfo"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "delete": {
        "operationId": "cancelJob", "tags": ["jobs"], "summary": "Cancel a job, or with `signal` only signal its running tasks (scancel)",
        "parameters": [{"name": "signal", "in": "query", "description": "Signal number", "schema": {"$ref": "#/components/schemas/i32"}},
          {"name": "step", "in": "query", "description": "Only this step: `signal` (default 9, which ends it) to its tasks", "schema": {"$ref": "#/components/schemas/u32"}},
          {"name": "batch", "in": "query", "description": "Only the batch step (scancel --batch): `signal` (default 9) to its shell and the processes it started", "schema": {"type": "boolean"}}],
        "responses": {
          "204": {"description": "Done"},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "post": {
        "operationId": "jobAction", "tags": ["jobs"],
        "summary": "Hold or release a pending job, requeue a running or finished one, suspend or resume a running one (operators), or change a pending job's time limit (scontrol hold/release/requeue/suspend/resume/update; only root may raise a limit)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/JobAction"}}}},
        "responses": {
          "204": {"description": "Done"},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/jobs/{id}/steps/{step}/attach": {
      "parameters": [{"$ref": "#/components/parameters/JobId"},
        {"name": "step", "in": "path", "required": true, "schema": {"$ref": "#/components/schemas/u32"}}],
      "post": {
        "operationId": "attachStep", "tags": ["jobs"], "summary": "Attach to a running srun step's I/O (sattach): its agents connect to the given listener",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StepIo"}}}},
        "responses": {
          "200": {"description": "The step and its layout", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StepResponse"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/jobs/{id}/steps": {
      "parameters": [{"$ref": "#/components/parameters/JobId"}],
      "post": {
        "operationId": "createStep", "tags": ["jobs"], "summary": "Launch a job step inside a running job's allocation (srun)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StepRequest"}}}},
        "responses": {
          "200": {"description": "The new step", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/StepResponse"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/nodes": {
      "get": {
        "operationId": "listNodes", "tags": ["nodes"], "summary": "List nodes (sinfo)",
        "responses": {
          "200": {"description": "Nodes", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/NodeInfo"}}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/nodes/{name}": {
      "parameters": [{"$ref": "#/components/parameters/NodeName"}],
      "delete": {
        "operationId": "deleteNode", "tags": ["nodes"], "summary": "Delete a node and revoke its credential (scontrol delete NodeName=..; root or the controller's user only); refused while jobs run on it",
        "responses": {
          "204": {"description": "Deleted"},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "post": {
        "operationId": "nodeAction", "tags": ["nodes"], "summary": "Drain or resume a node (scontrol update NodeName=.. State=..): root; or a program on the node itself with the node's credential (NHC), which may drain that node and resume only a drain the node made",
        "security": [{"bearerAuth": []}, {"nodeCredential": []}],
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/NodeAction"}}}},
        "responses": {
          "204": {"description": "Done"},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/history": {
      "get": {
        "operationId": "history", "tags": ["jobs"], "summary": "Accounting (sacct): finished jobs from the database, and the pending and running ones",
        "parameters": [
          {"name": "user", "in": "query", "description": "Only these users' (comma-separated names or uids)", "schema": {"type": "string"}},
          {"name": "since", "in": "query", "description": "Finished jobs that ended at or after this Unix time", "schema": {"$ref": "#/components/schemas/i64"}},
          {"name": "jobs", "in": "query", "description": "Only these jobs and their arrays' tasks (comma-separated job numbers, up to 10,000), read by id", "schema": {"type": "string", "pattern": "^[0-9]{1,19}(,[0-9]{1,19})*$", "maxLength": 19999}}
        ],
        "responses": {
          "200": {"description": "Jobs the caller may see, by id", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/JobInfo"}}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/config": {
      "get": {
        "operationId": "config", "tags": ["nodes"], "summary": "The cluster's settings and partitions (scontrol show config, show partition; sinfo)",
        "responses": {
          "200": {"description": "Settings", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ConfigInfo"}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      }
    },
    "/v1/status": {
      "get": {
        "operationId": "status", "tags": ["nodes"], "summary": "The controller that answers, its store and the store's health (tandem status)",
        "responses": {
          "200": {"description": "Status", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ClusterStatus"}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      }
    },
    "/v1/priority": {
      "get": {
        "operationId": "priorities", "tags": ["jobs"], "summary": "Pending jobs' priorities, factor by factor (sprio)",
        "responses": {
          "200": {"description": "Job id and breakdown, for each pending job the caller may see", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/PriorityRow"}}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      }
    },
    "/v1/jobs/cancel": {
      "post": {
        "operationId": "cancelJobs", "tags": ["jobs"], "summary": "Cancel (or signal) many jobs in one request (scancel -u, scancel of an array); each as DELETE /v1/jobs/{id}",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CancelRequest"}}}},
        "responses": {
          "200": {"description": "The ids refused, with why (another user's, finished, unknown)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CancelResponse"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/accounting": {
      "get": {
        "operationId": "accounting", "tags": ["accounting"], "summary": "QOS, accounts, users and associations as enforced (sacctmgr show, scontrol show assoc_mgr)",
        "responses": {
          "200": {"description": "The accounting", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AccountingInfo"}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      },
      "post": {
        "operationId": "changeAccounting", "tags": ["accounting"], "summary": "sacctmgr add, modify or delete of accounts, users and QOS (operators and administrators; coordinators for their accounts' users)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AcctRequest"}}}},
        "responses": {
          "200": {"description": "What was (or, with dry_run, would be) changed, as sacctmgr prints it", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/AcctResponse"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/reboot": {
      "post": {
        "operationId": "rebootNodes", "tags": ["admin"], "summary": "scontrol reboot (administrators): each node reboots by reboot_program once it is idle",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/RebootRequest"}}}},
        "responses": {
          "204": {"description": "Requested"},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/reboot/cancel": {
      "post": {
        "operationId": "cancelReboot", "tags": ["admin"], "summary": "scontrol cancel_reboot (administrators): forget reboots not yet issued",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/CancelRebootRequest"}}}},
        "responses": {
          "204": {"description": "Cancelled"},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/reconfigure": {
      "post": {
        "operationId": "reconfigure", "tags": ["admin"], "summary": "scontrol reconfigure (operators and administrators; root always): reads tandem.toml again, applies what can change at once, loads the job-submit script again",
        "responses": {
          "200": {"description": "Applied", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Reconfigured"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/backup": {
      "get": {
        "operationId": "backup", "tags": ["admin"], "summary": "tandem admin backup (administrators; root always): a consistent copy of the controller's database, taken while it runs; a controller started on it holds the jobs it has unfinished (reason Restored)",
        "responses": {
          "200": {"description": "The database (SQLite)", "content": {"application/vnd.sqlite3": {"schema": {"type": "string", "format": "binary"}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/debug": {
      "post": {
        "operationId": "setDebug", "tags": ["admin"], "summary": "scontrol setdebug (operators and administrators; root always): the controller's log filter, changed at once, until the next change or restart",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DebugLevel"}}}},
        "responses": {
          "200": {"description": "The filter now in effect", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/DebugLevel"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"}
        }
      }
    },
    "/v1/reservations": {
      "get": {
        "operationId": "reservations", "tags": ["reservations"], "summary": "Advance reservations (scontrol show reservation, sinfo -T)",
        "responses": {
          "200": {"description": "Every reservation, by name", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/ResvInfo"}}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      },
      "post": {
        "operationId": "createReservation", "tags": ["reservations"], "summary": "scontrol create reservation (operators and administrators; root always)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ResvSpec"}}}},
        "responses": {
          "200": {"description": "Created", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ResvCreated"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "423": {"$ref": "#/components/responses/Busy"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/reservations/{name}": {
      "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}}],
      "post": {
        "operationId": "updateReservation", "tags": ["reservations"], "summary": "scontrol update ReservationName=... (operators and administrators)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ResvSpec"}}}},
        "responses": {
          "204": {"description": "Updated"},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "423": {"$ref": "#/components/responses/Busy"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "delete": {
        "operationId": "deleteReservation", "tags": ["reservations"], "summary": "scontrol delete ReservationName=... (refused while jobs wait for it or run in it)",
        "responses": {
          "204": {"description": "Deleted"},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/shares": {
      "get": {
        "operationId": "shares", "tags": ["jobs"], "summary": "The fair-share tree: each account's shares, decayed usage and fair-share factor (sshare)",
        "responses": {
          "200": {"description": "One row per account the caller may see", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/ShareRow"}}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"}
        }
      }
    },
    "/v1/services": {
      "post": {
        "operationId": "applyService", "tags": ["services"], "summary": "Create or update a service (tandem service apply); unknown keys are refused",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApplyRequest"}}}},
        "responses": {
          "200": {"description": "Its revision now, and whether anything changed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApplyResponse"}}},
                  "links": {
                    "GetService": {"operationId": "getService", "parameters": {"name": "$response.body#/name"}},
                    "ServiceAction": {"operationId": "serviceAction", "parameters": {"name": "$response.body#/name"}},
                    "DeleteService": {"operationId": "deleteService", "parameters": {"name": "$response.body#/name"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "get": {
        "operationId": "listServices", "tags": ["services"], "summary": "List services: replicas, revisions, replica count over time and proxy figures",
        "responses": {
          "200": {"description": "Services the caller may see", "content": {"application/json": {"schema": {"type": "array", "items": {"$ref": "#/components/schemas/ServiceInfo"}}}}},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    },
    "/v1/services/{name}": {
      "parameters": [{"$ref": "#/components/parameters/ServiceName"}],
      "get": {
        "operationId": "getService", "tags": ["services"], "summary": "Show a service",
        "responses": {
          "200": {"description": "Service", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ServiceInfo"}}}},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "delete": {
        "operationId": "deleteService", "tags": ["services"], "summary": "Delete a service: its replicas drain, then stop, then the record goes",
        "responses": {
          "204": {"description": "Being deleted"},
          "400": {"$ref": "#/components/responses/Malformed"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      },
      "post": {
        "operationId": "serviceAction", "tags": ["services"], "summary": "Scale a service, or undo a rollout (to the previous revision, or to `revision`)",
        "requestBody": {"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ServiceAction"}}}},
        "responses": {
          "200": {"description": "The service and, after an undo, its new revision", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ServiceActionResponse"}}}},
          "400": {"$ref": "#/components/responses/Invalid"},
          "401": {"$ref": "#/components/responses/Unauthenticated"},
          "403": {"$ref": "#/components/responses/Forbidden"},
          "404": {"$ref": "#/components/responses/NotFound"},
          "409": {"$ref": "#/components/responses/Conflict"},
          "500": {"$ref": "#/components/responses/ServerError"}
        }
      }
    }
  },
  "components": {
    "securitySchemes": {
      "bearerAuth": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": "A user token (HS256 JWT with claims sub = uid in decimal, iat, exp) from `POST /v1/token` or `tandem token`, in `Authorization: Bearer TOKEN`. Read on TCP only: on the Unix socket the kernel identifies the caller and no header is needed."},
      "joinToken": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": "A single-use join token (HS256 JWT, aud tandem-join, signed with `DATA/nodes.key`) from `POST /v1/join-tokens` or `tandem token --join`"},
      "nodeCredential": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": "A node's own credential (HS256 JWT, aud tandem-node, sub = node name, ser = serial), from `POST /v1/agent/join`; valid for that node only, until the node is deleted"},
      "proxyCredential": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": "An inference proxy's credential (HS256 JWT, aud tandem-proxy) from `POST /v1/proxy-credentials` or `tandem token --proxy NAME`"}
    },
    "parameters": {
      "JobId": {"name": "id", "in": "path", "required": true, "description": "Job id", "schema": {"$ref": "#/components/schemas/u64"}},
      "NodeName": {"name": "name", "in": "path", "required": true, "description": "Node name", "schema": {"type": "string", "minLength": 1}},
      "ServiceName": {"name": "name", "in": "path", "required": true, "description": "Service name", "schema": {"type": "string", "minLength": 1}}
    },
    "responses": {
      "Malformed": {"description": "Malformed request: a path or query parameter or body that does not parse", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Invalid": {"description": "Malformed request, or one that can never be carried out as asked (no such partition, more than any node has, ...)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Unauthenticated": {"description": "No user identity: TCP without a token, or an invalid or expired token", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NoCredential": {"description": "No credential or join token, a forged or expired one, or one that was revoked", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "OtherNode": {"description": "The credential is another node's", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Forbidden": {"description": "Another user's job or service, or an operation only root may do", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "NotFound": {"description": "No such job, node or service (or one the caller may not see)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Conflict": {"description": "Not in a state that allows it (already finished, not pending, not running, being deleted, no such revision)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "ServerError": {"description": "The database failed", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
      "Busy": {"description": "What it needs is in use (Requested nodes are busy, or overlap another reservation)", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    },
    "schemas": {
      "u8": {"type": "integer", "minimum": 0, "maximum": 255},
      "u16": {"type": "integer", "minimum": 0, "maximum": 65535},
      "u32": {"type": "integer", "minimum": 0, "maximum": 4294967295},
      "u64": {"type": "integer", "minimum": 0, "maximum": 18446744073709551615},
      "i32": {"type": "integer", "minimum": -2147483648, "maximum": 2147483647},
      "i64": {"type": "integer", "minimum": -9223372036854775808, "maximum": 9223372036854775807},
      "u32OrNull": {"anyOf": [{"$ref": "#/components/schemas/u32"}, {"type": "null"}]},
      "u64OrNull": {"anyOf": [{"$ref": "#/components/schemas/u64"}, {"type": "null"}]},
      "i32OrNull": {"anyOf": [{"$ref": "#/components/schemas/i32"}, {"type": "null"}]},
      "i64OrNull": {"anyOf": [{"$ref": "#/components/schemas/i64"}, {"type": "null"}]},
      "StringOrNull": {"type": ["string", "null"]},
      "BoolOrNull": {"type": ["boolean", "null"]},
      "Strings": {"type": "array", "items": {"type": "string"}},
      "StringPair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}], "items": false, "minItems": 2},
      "Count": {"description": "A name and a count", "type": "array", "prefixItems": [{"type": "string"}, {"$ref": "#/components/schemas/u64"}], "items": false, "minItems": 2},
      "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string", "description": "Message for the user"},
        "user_msg": {"$ref": "#/components/schemas/StringOrNull", "description": "The site's job-submit policy's message to the user (slurm.log_user), shown before the error"}}, "additionalProperties": false},
      "Token": {"type": "object", "required": ["token", "expires"], "additionalProperties": false, "properties": {
        "token": {"type": "string", "description": "The JWT"},
        "expires": {"$ref": "#/components/schemas/i64", "description": "Unix seconds"},
        "server": {"type": ["string", "null"], "description": "The controller's TCP address as clients reach it (`https://ADDR`; an unspecified listen address reads as loopback), for `tandem token --kubeconfig`"},
        "ca_pem": {"type": ["string", "null"], "description": "The cluster CA's certificate (PEM), when the TCP port serves TLS"}}},

      "SubmitRequest": {"type": "object", "required": ["batch", "cwd", "host", "env"], "properties": {
        "batch": {"$ref": "#/components/schemas/BatchSpec"},
        "cwd": {"type": "string", "description": "Submit directory"},
        "host": {"type": "string", "description": "Submit host"},
        "env": {"type": "array", "description": "Exported environment", "items": {"$ref": "#/components/schemas/StringPair"}},
        "umask": {"$ref": "#/components/schemas/u32OrNull", "description": "The submitting command's umask (SLURM_UMASK; null or absent: 0022)"}}},
      "BatchSpec": {"type": "object", "description": "The sbatch options and the script, as the client parsed them from its command line and #SBATCH lines",
        "required": ["nice", "gres_other", "constraint", "nodelist", "exclude", "dependency", "exclusive", "hold", "parsable", "test_only", "script", "script_args"],
        "properties": {
          "job_name": {"$ref": "#/components/schemas/StringOrNull"},
          "partition": {"$ref": "#/components/schemas/StringOrNull"},
          "account": {"$ref": "#/components/schemas/StringOrNull"},
          "qos": {"$ref": "#/components/schemas/StringOrNull"},
          "nice": {"$ref": "#/components/schemas/i32"},
          "nodes": {"description": "-N min-max", "anyOf": [{"type": "array", "prefixItems": [{"$ref": "#/components/schemas/u32"}, {"$ref": "#/components/schemas/u32"}], "items": false, "minItems": 2}, {"type": "null"}]},
          "ntasks": {"$ref": "#/components/schemas/u32OrNull"},
          "ntasks_per_node": {"$ref": "#/components/schemas/u32OrNull"},
          "cpus_per_task": {"$ref": "#/components/schemas/u32OrNull"},
          "mem": {"anyOf": [{"$ref": "#/components/schemas/MemRequest"}, {"type": "null"}]},
          "gpus": {"anyOf": [{"$ref": "#/components/schemas/GpuRequest"}, {"type": "null"}]},
          "gres_other": {"type": "array", "items": {"$ref": "#/components/schemas/Count"}},
          "constraint": {"$ref": "#/components/schemas/Strings"},
          "nodelist": {"$ref": "#/components/schemas/Strings"},
          "exclude": {"$ref": "#/components/schemas/Strings"},
          "time": {"description": "Time limit, seconds; 0: unlimited; null or absent: the partition's default", "$ref": "#/components/schemas/i64OrNull"},
          "time_min": {"$ref": "#/components/schemas/i64OrNull"},
          "output": {"$ref": "#/components/schemas/StringOrNull"},
          "error": {"$ref": "#/components/schemas/StringOrNull"},
          "array": {"anyOf": [{"$ref": "#/components/schemas/ArraySpec"}, {"type": "null"}]},
          "dependency": {"type": "array", "items": {"$ref": "#/components/schemas/Dependency"}},
          "requeue": {"$ref": "#/components/schemas/BoolOrNull"},
          "expedite": {"type": "boolean", "description": "--requeue=expedite: requeued first in the queue when its node fails (needs enable_expedited_requeue)"},
          "signal": {"anyOf": [{"$ref": "#/components/schemas/Signal"}, {"type": "null"}]},
          "exclusive": {"type": "boolean"},
          "hold": {"type": "boolean"},
          "begin": {"$ref": "#/components/schemas/i64OrNull"},
          "chdir": {"$ref": "#/components/schemas/StringOrNull"},
          "export": {"$ref": "#/components/schemas/StringOrNull"},
          "parsable": {"type": "boolean"},
          "test_only": {"type": "boolean"},
          "switches": {"$ref": "#/components/schemas/u32OrNull"},
          "wckey": {"$ref": "#/components/schemas/StringOrNull", "description": "--wckey (recorded)"},
          "wait": {"type": "boolean", "description": "-W/--wait (the client waits; the controller ignores it)"},
          "interactive": {"type": "boolean", "description": "An allocation (salloc, srun outside one): no script runs; POST action complete ends it"},
          "comment": {"$ref": "#/components/schemas/StringOrNull", "description": "--comment (recorded)"},
          "mail_type": {"$ref": "#/components/schemas/StringOrNull", "description": "--mail-type (recorded; no mail is sent)"},
          "mail_user": {"$ref": "#/components/schemas/StringOrNull", "description": "--mail-user (recorded)"},
          "mem_per_gpu": {"anyOf": [{"$ref": "#/components/schemas/u64"}, {"type": "null"}], "description": "--mem-per-gpu, bytes"},
          "cpus_per_gpu": {"$ref": "#/components/schemas/u32OrNull", "description": "--cpus-per-gpu"},
          "reservation": {"$ref": "#/components/schemas/StringOrNull", "description": "--reservation: the advance reservation to run in"},
          "hint": {"$ref": "#/components/schemas/StringOrNull", "description": "--hint (recorded)"},
          "distribution": {"$ref": "#/components/schemas/StringOrNull", "description": "-m/--distribution (recorded)"},
          "threads_per_core": {"$ref": "#/components/schemas/u32OrNull", "description": "--threads-per-core (recorded)"},
          "get_user_env": {"$ref": "#/components/schemas/StringOrNull", "description": "--get-user-env[=timeout][S|L] (recorded)"},
          "verbose": {"$ref": "#/components/schemas/u32", "description": "-v count (the client's)"},
          "quiet": {"type": "boolean", "description": "-Q (the client's)"},
          "open_append": {"type": ["boolean", "null"], "description": "--open-mode: true append, false truncate, null Slurm's default (truncate at the first start)"},
          "script": {"type": "string"},
          "script_path": {"$ref": "#/components/schemas/StringOrNull"},
          "script_args": {"$ref": "#/components/schemas/Strings"},
          "container": {"anyOf": [{"$ref": "#/components/schemas/Container"}, {"type": "null"}], "description": "sbatch's --container-*: the batch script runs in this image"},
          "het": {"type": "array", "items": {"$ref": "#/components/schemas/BatchSpec"}, "maxItems": 127, "description": "A heterogeneous job's components after the first (sbatch A : B, #SBATCH hetjob), each its own options and no script; all start together or none"}}},
      "MemRequest": {"oneOf": [
        {"type": "object", "required": ["PerNode"], "additionalProperties": false, "properties": {"PerNode": {"$ref": "#/components/schemas/u64", "description": "--mem, bytes per node (0: none)"}}},
        {"type": "object", "required": ["PerCpu"], "additionalProperties": false, "properties": {"PerCpu": {"$ref": "#/components/schemas/u64", "description": "--mem-per-cpu, bytes"}}}]},
      "GpuRequest": {"type": "object", "required": ["per", "milli"], "properties": {
        "per": {"oneOf": [
          {"type": "object", "required": ["Job"], "additionalProperties": false, "properties": {"Job": {"$ref": "#/components/schemas/u32"}}},
          {"type": "object", "required": ["Node"], "additionalProperties": false, "properties": {"Node": {"$ref": "#/components/schemas/u32"}}},
          {"type": "object", "required": ["Task"], "additionalProperties": false, "properties": {"Task": {"$ref": "#/components/schemas/u32"}}}]},
        "gpu_type": {"$ref": "#/components/schemas/StringOrNull"},
        "milli": {"$ref": "#/components/schemas/u32", "description": "Milli-GPUs of each GPU (1000: whole GPUs)"}}},
      "ArraySpec": {"type": "object", "required": ["indices"], "properties": {
        "indices": {"type": "array", "items": {"$ref": "#/components/schemas/u32"}, "description": "Ascending, without repeats"},
        "max_running": {"$ref": "#/components/schemas/u32OrNull"}}},
      "Dependency": {"type": "object", "required": ["kind"], "properties": {
        "kind": {"enum": ["After", "AfterOk", "AfterNotOk", "AfterAny", "Singleton"]},
        "job": {"$ref": "#/components/schemas/u64OrNull"}}},
      "Signal": {"type": "object", "required": ["number", "before", "batch_only"], "properties": {
        "number": {"$ref": "#/components/schemas/i32"},
        "before": {"$ref": "#/components/schemas/i64", "description": "Seconds before the time limit"},
        "batch_only": {"type": "boolean"}}},
      "SubmitResponse": {"type": "object", "required": ["job_ids", "test_only"], "additionalProperties": false, "properties": {
        "job_ids": {"type": "array", "items": {"$ref": "#/components/schemas/u64"}, "description": "New job ids (several for an array; none with test_only)"},
        "test_only": {"$ref": "#/components/schemas/StringOrNull", "description": "With test_only: what would happen"},
        "user_msg": {"$ref": "#/components/schemas/StringOrNull", "description": "The site's job-submit policy's message to the user (slurm.log_user)"}}},

      "JobInfo": {"type": "object", "additionalProperties": false,
        "required": ["id", "display_id", "name", "user", "account", "partition", "qos", "state", "reason", "nodelist", "nodes", "ntasks", "cpus", "gpus", "time_limit", "submit", "start", "start_estimated", "end", "exit_code", "restarts", "workdir", "output", "steps", "message"],
        "properties": {
          "id": {"$ref": "#/components/schemas/u64"},
          "display_id": {"type": "string", "description": "`123`, or `120_3` for an array task"},
          "name": {"type": "string"}, "user": {"type": "string"}, "account": {"type": "string"},
          "partition": {"type": "string"}, "qos": {"type": "string"},
          "state": {"type": "string", "description": "Slurm's name: PENDING, RUNNING, COMPLETED, ..."},
          "reason": {"type": "string", "description": "Pending reason (None unless pending)"},
          "nodelist": {"type": "string", "description": "Hostlist syntax"},
          "nodes": {"$ref": "#/components/schemas/u32"}, "ntasks": {"$ref": "#/components/schemas/u32"},
          "cpus": {"$ref": "#/components/schemas/u32"}, "gpus": {"$ref": "#/components/schemas/u32"},
          "time_limit": {"$ref": "#/components/schemas/i64OrNull", "description": "Seconds; null: unlimited"},
          "submit": {"$ref": "#/components/schemas/i64"},
          "start": {"$ref": "#/components/schemas/i64OrNull", "description": "Start, or expected start of a pending job"},
          "start_estimated": {"type": "boolean"},
          "end": {"$ref": "#/components/schemas/i64OrNull"},
          "exit_code": {"type": "string", "description": "code:signal"},
          "restarts": {"$ref": "#/components/schemas/u32"},
          "workdir": {"type": "string"}, "output": {"type": "string"},
          "steps": {"type": "array", "items": {"$ref": "#/components/schemas/StepInfo"}},
          "recorded": {"type": "array", "items": {"$ref": "#/components/schemas/StringPair"}, "description": "Options recorded with no effect (Comment, WCKey, MailUser, MailType, Hint, ...), as scontrol show job keys; owner and root only"},
          "message": {"$ref": "#/components/schemas/StringOrNull", "description": "Why it failed or was rejected"},
          "uid": {"$ref": "#/components/schemas/u32"}, "gid": {"$ref": "#/components/schemas/u32"},
          "array_job_id": {"$ref": "#/components/schemas/u64OrNull", "description": "An array task's array job id"},
          "array_task_id": {"$ref": "#/components/schemas/u32OrNull", "description": "An array task's index"},
          "array_max_running": {"$ref": "#/components/schemas/u32OrNull", "description": "--array=...%N"},
          "array_collapsed": {"type": "array", "description": "With collapse: the pending tasks this row stands for, as (first, last) index ranges",
            "items": {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/u32"}, {"$ref": "#/components/schemas/u32"}], "items": false, "minItems": 2}},
          "mem_per_node_mb": {"$ref": "#/components/schemas/u64OrNull", "description": "--mem, MiB (0: none asked)"},
          "mem_per_cpu_mb": {"$ref": "#/components/schemas/u64OrNull", "description": "--mem-per-cpu, MiB"},
          "cpus_per_task": {"$ref": "#/components/schemas/u32"},
          "cancelled_by": {"$ref": "#/components/schemas/u32OrNull", "description": "The uid that cancelled it"},
          "error": {"$ref": "#/components/schemas/StringOrNull", "description": "-e pattern"},
          "features": {"type": "array", "items": {"type": "string"}},
          "dependency": {"type": "string", "description": "As Slurm prints it: afterok:12,singleton"},
          "req_nodes": {"type": "string", "description": "-w, hostlist syntax"},
          "exc_nodes": {"type": "string", "description": "-x, hostlist syntax"},
          "nice": {"$ref": "#/components/schemas/i32"},
          "submit_dir": {"type": "string", "description": "`(hidden)` for another user's job"},
          "time_min": {"$ref": "#/components/schemas/i64OrNull", "description": "--time-min, seconds"},
          "allocation": {"type": "array", "items": {"$ref": "#/components/schemas/NodeAllocInfo"}, "description": "What it holds on each node (the last run's once it ended; empty while pending)"},
          "het_job_id": {"$ref": "#/components/schemas/u64", "description": "A heterogeneous job's component: the leader's id (lists show one row per component, id the leader's plus het_job_offset, display_id N+K)"},
          "het_job_offset": {"$ref": "#/components/schemas/u32", "description": "A heterogeneous job's component: its index"},
          "het_size": {"$ref": "#/components/schemas/u32", "description": "A heterogeneous job's component: how many components the job has"},
          "reservation": {"type": "string", "description": "The advance reservation it runs in (--reservation)"},
          "suspended": {"$ref": "#/components/schemas/i64", "description": "Seconds its run was suspended before suspended_since (sacct Suspended; left out of its elapsed time)"},
          "suspended_since": {"$ref": "#/components/schemas/i64OrNull", "description": "Suspended now, since then (scontrol suspend, or preempted by suspension)"}}},
      "NodeAllocInfo": {"type": "object", "additionalProperties": false, "required": ["name", "cpus", "memory_mb", "gpus"],
        "properties": {"name": {"type": "string"}, "cpus": {"$ref": "#/components/schemas/u32"}, "memory_mb": {"$ref": "#/components/schemas/u64"}, "gpus": {"$ref": "#/components/schemas/u32"}}},
      "CancelRequest": {"type": "object", "additionalProperties": false, "required": ["ids"],
        "properties": {"ids": {"type": "array", "items": {"$ref": "#/components/schemas/u64"}}, "signal": {"$ref": "#/components/schemas/i32OrNull", "description": "Only signal (scancel -s)"},
          "batch": {"type": "boolean", "description": "With signal: the batch shell only (scancel -b)"},
          "matching": {"anyOf": [{"$ref": "#/components/schemas/CancelMatch"}, {"type": "null"}]}}},
      "CancelMatch": {"type": "object", "additionalProperties": false, "description": "Besides ids: every unfinished job the caller can see that matches all of these (scancel -u, -t, -p without ids); at least one must be set",
        "properties": {"users": {"type": "array", "items": {"type": "string"}, "description": "Names or uids, any of them"},
          "states": {"type": "array", "items": {"type": "string", "enum": ["PENDING", "RUNNING", "SUSPENDED"]}},
          "partition": {"type": ["string", "null"]}}},
      "CancelResponse": {"type": "object", "additionalProperties": false, "required": ["refused"],
        "properties": {"refused": {"type": "array", "items": {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/u64"}, {"type": "string"}], "items": false, "minItems": 2}}}},
      "Tres": {"type": "object", "additionalProperties": false, "description": "Trackable resources of a limit; an absent one is not limited",
        "properties": {"cpu": {"$ref": "#/components/schemas/u64"}, "mem": {"$ref": "#/components/schemas/u64", "description": "MiB"},
          "node": {"$ref": "#/components/schemas/u64"}, "gpu": {"$ref": "#/components/schemas/u64", "description": "gres/gpu"}}},
      "Limits": {"type": "object", "additionalProperties": false, "description": "Slurm's association and QOS limits; an absent one is not set (on a QOS, max_jobs and max_submit_jobs are per user)",
        "properties": {"max_jobs": {"$ref": "#/components/schemas/u32"}, "max_submit_jobs": {"$ref": "#/components/schemas/u32"},
          "max_wall": {"$ref": "#/components/schemas/i64", "description": "Seconds"}, "max_tres_per_job": {"$ref": "#/components/schemas/Tres"},
          "max_tres_per_user": {"$ref": "#/components/schemas/Tres"}, "grp_jobs": {"$ref": "#/components/schemas/u32"},
          "grp_submit_jobs": {"$ref": "#/components/schemas/u32"}, "grp_tres": {"$ref": "#/components/schemas/Tres"}}},
      "Qos": {"type": "object", "additionalProperties": false, "required": ["name", "priority", "preempt_tier", "grace_time"],
        "properties": {"name": {"type": "string"}, "priority": {"$ref": "#/components/schemas/u32"},
          "preempt_tier": {"$ref": "#/components/schemas/u32", "description": "Preempts work of strictly lower tiers"},
          "grace_time": {"$ref": "#/components/schemas/i64", "description": "Seconds"}, "limits": {"$ref": "#/components/schemas/Limits"},
          "preempt_mode": {"type": "string", "enum": ["requeue", "suspend"], "description": "What preemption does to this QOS's batch jobs"},
          "description": {"type": "string"}}},
      "Account": {"type": "object", "additionalProperties": false, "required": ["name", "shares"],
        "properties": {"name": {"type": "string"}, "shares": {"$ref": "#/components/schemas/u32"}, "parent": {"type": "string", "description": "Absent: root"},
          "description": {"type": "string"}, "organization": {"type": "string"}, "qos": {"$ref": "#/components/schemas/Strings"},
          "default_qos": {"type": "string"}, "limits": {"$ref": "#/components/schemas/Limits"}}},
      "User": {"type": "object", "additionalProperties": false, "required": ["name", "default_account"],
        "properties": {"name": {"type": "string"}, "default_account": {"type": "string"},
          "admin_level": {"enum": ["None", "Operator", "Administrator"]}, "coordinator": {"$ref": "#/components/schemas/Strings"}}},
      "AssocRow": {"type": "object", "additionalProperties": false, "required": ["account", "user", "parent", "shares", "qos", "default_qos", "limits"],
        "properties": {"account": {"type": "string"}, "user": {"type": "string", "description": "Empty for the account's own row"},
          "parent": {"type": "string", "description": "An account row's parent; empty for a user's row"}, "shares": {"$ref": "#/components/schemas/u32"},
          "qos": {"$ref": "#/components/schemas/Strings"}, "default_qos": {"type": "string"}, "limits": {"$ref": "#/components/schemas/Limits"}}},
      "AccountingInfo": {"type": "object", "additionalProperties": false, "required": ["cluster", "enforce", "qos", "accounts", "users", "assocs"],
        "properties": {"cluster": {"type": "string"}, "enforce": {"type": "string", "description": "AccountingStorageEnforce: associations,limits,qos or none"},
          "qos": {"type": "array", "items": {"$ref": "#/components/schemas/Qos"}}, "accounts": {"type": "array", "items": {"$ref": "#/components/schemas/Account"}},
          "users": {"type": "array", "items": {"$ref": "#/components/schemas/User"}}, "assocs": {"type": "array", "items": {"$ref": "#/components/schemas/AssocRow"}}}},
      "Setting": {"type": "object", "additionalProperties": false, "required": ["key", "op", "value"],
        "properties": {"key": {"type": "string", "description": "Slurm's keyword: Names, Account, User, Parent, Description, Organization, Fairshare, QOS, DefaultQOS, DefaultAccount, AdminLevel, MaxJobs, MaxSubmitJobs, MaxWall, MaxTRESPerJob, MaxTRESPerUser, MaxJobsPerUser, MaxSubmitJobsPerUser, GrpJobs, GrpSubmitJobs, GrpTRES, Priority, PreemptTier, GraceTime"},
          "op": {"enum": ["set", "add", "remove"]}, "value": {"type": "string"}}},
      "AcctChange": {"type": "object", "additionalProperties": false, "required": ["verb", "entity", "filter", "set"],
        "properties": {"verb": {"enum": ["add", "modify", "delete"]}, "entity": {"enum": ["account", "user", "qos"]},
          "filter": {"type": "array", "items": {"$ref": "#/components/schemas/Setting"}}, "set": {"type": "array", "items": {"$ref": "#/components/schemas/Setting"}}}},
      "AcctRequest": {"type": "object", "additionalProperties": false, "required": ["change"],
        "properties": {"change": {"$ref": "#/components/schemas/AcctChange"}, "dry_run": {"type": "boolean", "description": "Only say what it would do"}}},
      "ResvList": {"type": "object", "additionalProperties": false, "required": ["op", "names"], "properties": {
        "op": {"enum": ["set", "add", "remove"]}, "negated": {"type": "boolean", "description": "Users=-bob: everyone but these"},
        "names": {"type": "array", "items": {"type": "string"}}}},
      "ResvSpec": {"type": "object", "additionalProperties": false, "description": "scontrol create|update reservation's keys, times absolute",
        "properties": {
          "name": {"$ref": "#/components/schemas/StringOrNull"}, "start": {"$ref": "#/components/schemas/i64OrNull"}, "end": {"$ref": "#/components/schemas/i64OrNull"},
          "duration": {"$ref": "#/components/schemas/i64OrNull", "description": "Seconds"},
          "nodes": {"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}], "description": "Expanded node names, or [\"ALL\"]"},
          "node_cnt": {"$ref": "#/components/schemas/u32OrNull"},
          "users": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/ResvList"}]},
          "accounts": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/ResvList"}]},
          "partition": {"$ref": "#/components/schemas/StringOrNull"},
          "flags_set": {"type": "array", "items": {"type": "string"}}, "flags_clear": {"type": "array", "items": {"type": "string"}},
          "tres": {"$ref": "#/components/schemas/StringOrNull"}, "cpus": {"$ref": "#/components/schemas/u32OrNull"}, "gpus": {"$ref": "#/components/schemas/u32OrNull"}}},
      "ResvFlags": {"type": "object", "additionalProperties": false, "properties": {
        "maint": {"type": "boolean"}, "ignore_jobs": {"type": "boolean"}, "daily": {"type": "boolean"}, "weekly": {"type": "boolean"},
        "flex": {"type": "boolean"}, "magnetic": {"type": "boolean"}, "overlap": {"type": "boolean"}, "spec_nodes": {"type": "boolean"}}},
      "Reservation": {"type": "object", "additionalProperties": false, "required": ["name", "start", "end", "nodes"], "properties": {
        "name": {"type": "string"}, "start": {"$ref": "#/components/schemas/i64"}, "end": {"$ref": "#/components/schemas/i64"},
        "nodes": {"type": "array", "items": {"type": "string"}},
        "users": {"type": "array", "items": {"type": "string"}}, "users_negated": {"type": "boolean"},
        "accounts": {"type": "array", "items": {"type": "string"}}, "accounts_negated": {"type": "boolean"},
        "partition": {"$ref": "#/components/schemas/StringOrNull"}, "flags": {"$ref": "#/components/schemas/ResvFlags"}, "tres": {"type": "string"}}},
      "ResvInfo": {"type": "object", "additionalProperties": false, "required": ["resv", "start", "end", "active", "cpus", "gpus"], "properties": {
        "resv": {"$ref": "#/components/schemas/Reservation"},
        "start": {"$ref": "#/components/schemas/i64", "description": "The window in force or next"}, "end": {"$ref": "#/components/schemas/i64"},
        "active": {"type": "boolean"}, "cpus": {"$ref": "#/components/schemas/u32"}, "gpus": {"$ref": "#/components/schemas/u32"}}},
      "Reconfigured": {"type": "object", "additionalProperties": false, "required": ["restart_needed"], "properties": {
        "restart_needed": {"type": "array", "items": {"type": "string"}, "description": "Changed keys that take effect at the next start"}}},
      "DebugLevel": {"type": "object", "additionalProperties": false, "required": ["filter"], "properties": {
        "filter": {"type": "string", "maxLength": 1024, "description": "A level (error, warn, info, debug, trace; Slurm's quiet, fatal, verbose, debug2..debug5, 0..9) or EnvFilter directives (info,server::jobs=debug)"}}},
      "ResvCreated": {"type": "object", "additionalProperties": false, "required": ["name"], "properties": {"name": {"type": "string"}}},
      "AcctResponse": {"type": "object", "additionalProperties": false, "required": ["text"], "properties": {"text": {"type": "string"}}},
      "ShareRow": {"type": "object", "additionalProperties": false,
        "required": ["account", "raw_shares", "norm_shares", "raw_usage", "effective_usage", "fairshare"],
        "properties": {
          "account": {"type": "string"}, "user": {"type": "string", "description": "A user's row within the account (from its association); empty for the account's row"},
          "raw_shares": {"$ref": "#/components/schemas/u32"},
          "norm_shares": {"type": "number"}, "raw_usage": {"type": "number", "description": "Decayed usage (resource-seconds)"},
          "effective_usage": {"type": "number"}, "fairshare": {"type": "number", "description": "2^(-effective_usage/norm_shares)"}}},
      "StepInfo": {"type": "object", "additionalProperties": false,
        "required": ["id", "command", "name", "ntasks", "nodelist", "done", "exit_code", "start", "end"],
        "properties": {
          "id": {"type": "string", "description": "`batch` or the step number"},
          "name": {"type": "string", "description": "srun -J, else the command's first word; batch for the batch step; `(hidden)` for another user's step"},
          "command": {"type": "string", "description": "`(hidden)` for another user's step"},
          "ntasks": {"$ref": "#/components/schemas/u32"}, "nodelist": {"type": "string"},
          "done": {"type": "boolean"}, "exit_code": {"$ref": "#/components/schemas/i32"},
          "start": {"$ref": "#/components/schemas/i64"}, "end": {"$ref": "#/components/schemas/i64OrNull"},
          "timed_out": {"type": "boolean", "description": "Ended by its own time limit (srun -t): TIMEOUT"},
          "cpus": {"$ref": "#/components/schemas/u32", "description": "CPUs it holds (its own with --exact or -c, else the job's on its nodes)"},
          "usage": {"type": "array", "description": "Its tasks' usage as last reported: rank, node, most resident memory (KiB), CPU milliseconds; owner and root only",
            "items": {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/u32"}, {"type": "string"}, {"$ref": "#/components/schemas/u64"}, {"$ref": "#/components/schemas/u64"}], "items": false, "minItems": 4}},
          "layout": {"type": "array", "description": "Its nodes and the tasks on each, in rank order (sattach --layout)",
            "items": {"type": "array", "prefixItems": [{"type": "string"}, {"$ref": "#/components/schemas/u32"}], "items": false, "minItems": 2}},
          "error": {"$ref": "#/components/schemas/StringOrNull", "description": "Why a task of it could not run (its launch, its container); owner and root only"}}},
      "JobAction": {"oneOf": [
        {"type": "object", "required": ["action"], "properties": {"action": {"enum": ["hold", "release", "requeue", "suspend", "resume"]}, "time_limit": {"$ref": "#/components/schemas/i64OrNull", "description": "Ignored"}}},
        {"type": "object", "required": ["action", "time_limit"], "properties": {"action": {"const": "update"}, "time_limit": {"$ref": "#/components/schemas/i64", "description": "New time limit, seconds"}}},
        {"type": "object", "required": ["action"], "properties": {"action": {"const": "complete"}, "exit_code": {"type": "integer", "minimum": 0, "maximum": 255, "description": "The allocation's exit code (salloc's command's; default 0)"}}}]},
      "StepRequest": {"type": "object", "required": ["argv"], "properties": {
        "nodes": {"$ref": "#/components/schemas/u32OrNull", "description": "-N"},
        "ntasks": {"$ref": "#/components/schemas/u32OrNull", "description": "-n"},
        "ntasks_per_node": {"$ref": "#/components/schemas/u32OrNull"},
        "argv": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "Command and arguments"},
        "spec": {"$ref": "#/components/schemas/StepSpec"}}},
      "StepSpec": {"type": "object", "additionalProperties": false, "description": "srun's environment, directory, output, -K, -J, -w, -x (absent: the job's)", "properties": {
        "umask": {"$ref": "#/components/schemas/u32OrNull", "description": "srun's umask (null or absent: the job's)"},
        "env": {"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "string"}], "items": false, "minItems": 2}}]},
        "workdir": {"$ref": "#/components/schemas/StringOrNull"},
        "output": {"$ref": "#/components/schemas/StringOrNull"},
        "error": {"$ref": "#/components/schemas/StringOrNull"},
        "truncate": {"type": "boolean"},
        "kill_on_bad_exit": {"type": "boolean"},
        "name": {"$ref": "#/components/schemas/StringOrNull"},
        "nodelist": {"type": "array", "items": {"type": "string"}},
        "exclude": {"type": "array", "items": {"type": "string"}},
        "io": {"anyOf": [{"$ref": "#/components/schemas/StepIo"}, {"type": "null"}]},
        "res": {"$ref": "#/components/schemas/StepRes"},
        "cpu_bind": {"$ref": "#/components/schemas/StringOrNull", "description": "--cpu-bind: rank, map_cpu:<list> and mask_cpu:<list> bind each task; others are accepted"},
        "distribution": {"$ref": "#/components/schemas/StringOrNull", "description": "-m/--distribution (recorded)"},
        "container": {"anyOf": [{"$ref": "#/components/schemas/Container"}, {"type": "null"}]},
        "het": {"type": "array", "description": "In a heterogeneous job: the components the step runs on, in rank order (srun --het-group, srun A : B); absent: component 0", "items": {
          "type": "object", "additionalProperties": false, "required": ["group"], "properties": {
            "group": {"$ref": "#/components/schemas/u32"}, "nodes": {"$ref": "#/components/schemas/u32OrNull"}, "ntasks": {"$ref": "#/components/schemas/u32OrNull"},
            "ntasks_per_node": {"$ref": "#/components/schemas/u32OrNull"}, "argv": {"type": "array", "items": {"type": "string"}, "description": "Its command (empty: the step's)"}}}}}},
      "Container": {"type": "object", "additionalProperties": false, "required": ["image"],
        "description": "Pyxis's --container-* options: the step's tasks run in this image (docs/containers.md)", "properties": {
        "image": {"type": "string", "description": "--container-image: [USER@][REGISTRY#]IMAGE[:TAG], Docker's REGISTRY/IMAGE[:TAG], or oci:DIR[:TAG]"},
        "mounts": {"type": "array", "items": {"type": "object", "additionalProperties": false, "required": ["src", "dst"], "properties": {
          "src": {"type": "string"}, "dst": {"type": "string"}, "readonly": {"type": "boolean"}}}, "description": "--container-mounts"},
        "workdir": {"$ref": "#/components/schemas/StringOrNull", "description": "--container-workdir"},
        "env": {"type": "array", "items": {"type": "string"}, "description": "--container-env: variables whose job value wins over the image's"},
        "name": {"$ref": "#/components/schemas/StringOrNull", "description": "--container-name"},
        "mount_home": {"type": "boolean", "description": "--container-mount-home"},
        "remap_root": {"type": "boolean", "description": "--container-remap-root"},
        "writable": {"type": "boolean", "description": "--container-writable"},
        "join_job": {"type": "boolean", "description": "Join the container the job's batch script or replica runs in on each node (kubectl exec), not a new one"}}},
      "StepRes": {"type": "object", "additionalProperties": false,
        "description": "What the step takes of its job's allocation, as srun's options inside one (a step that cannot have it now waits: HTTP 423)", "properties": {
        "cpus_per_task": {"$ref": "#/components/schemas/u32OrNull", "description": "-c (implies exact)"},
        "exact": {"type": "boolean", "description": "--exact, or --exclusive inside an allocation: only tasks x cpus-per-task CPUs (else every free CPU of the job on each node)"},
        "whole": {"type": "boolean", "description": "--whole"},
        "overlap": {"type": "boolean", "description": "--overlap: holds nothing, waits for nothing"},
        "overcommit": {"type": "boolean", "description": "-O"},
        "mem": {"anyOf": [{"$ref": "#/components/schemas/MemRequest"}, {"type": "null"}]},
        "gpus": {"oneOf": [{"type": "null"}, {"type": "array", "prefixItems": [
          {"oneOf": [
            {"type": "object", "required": ["Job"], "additionalProperties": false, "properties": {"Job": {"$ref": "#/components/schemas/u32"}}},
            {"type": "object", "required": ["Node"], "additionalProperties": false, "properties": {"Node": {"$ref": "#/components/schemas/u32"}}},
            {"type": "object", "required": ["Task"], "additionalProperties": false, "properties": {"Task": {"$ref": "#/components/schemas/u32"}}}]},
          {"$ref": "#/components/schemas/StringOrNull"}], "items": false, "minItems": 2}]},
        "time_limit": {"$ref": "#/components/schemas/i64OrNull", "description": "-t, seconds"}}},
      "StepIo": {"type": "object", "additionalProperties": false, "required": ["addr", "cert", "key"],
        "description": "srun's I/O endpoint: the tasks' agents connect to addr over TLS, accepting only cert, and present key", "properties": {
        "addr": {"type": "string", "description": "IP:PORT"}, "cert": {"type": "string", "description": "PEM"},
        "key": {"type": "string", "pattern": "^[0-9a-fA-F]{64}$"},
        "stdin": {"oneOf": [{"type": "string", "enum": ["All", "Null"]},
          {"type": "object", "required": ["Rank"], "additionalProperties": false, "properties": {"Rank": {"$ref": "#/components/schemas/u32"}}}]},
        "stdout": {"type": "boolean"}, "stderr": {"type": "boolean"}, "pty": {"type": "boolean"}, "pmi": {"type": "boolean"}, "pmix": {"type": "boolean"},
        "winsize": {"oneOf": [{"type": "null"}, {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/u16"}, {"$ref": "#/components/schemas/u16"}], "items": false, "minItems": 2}]}}},
      "StepResponse": {"type": "object", "required": ["step"], "additionalProperties": false, "properties": {"step": {"$ref": "#/components/schemas/u32"},
        "layout": {"type": "array", "description": "Nodes and tasks on each, in rank order", "items": {"type": "array", "prefixItems": [{"type": "string"}, {"$ref": "#/components/schemas/u32"}], "items": false, "minItems": 2}}}},

      "NodeInfo": {"type": "object", "additionalProperties": false, "required": ["name", "state", "cpus", "memory_mb", "gpus", "reason", "addr"], "properties": {
        "name": {"type": "string"},
        "state": {"enum": ["idle", "mixed", "allocated", "drain", "down", "maint", "reserved"]},
        "cpus": {"description": "Total and allocated", "type": "array", "prefixItems": [{"$ref": "#/components/schemas/u32"}, {"$ref": "#/components/schemas/u32"}], "items": false, "minItems": 2},
        "memory_mb": {"description": "Total and allocated, MiB", "type": "array", "prefixItems": [{"$ref": "#/components/schemas/u64"}, {"$ref": "#/components/schemas/u64"}], "items": false, "minItems": 2},
        "gpus": {"description": "Total, allocated and the model", "type": "array", "prefixItems": [{"$ref": "#/components/schemas/u32"}, {"$ref": "#/components/schemas/u32"}, {"$ref": "#/components/schemas/StringOrNull"}], "items": false, "minItems": 3},
        "reason": {"$ref": "#/components/schemas/StringOrNull"},
        "addr": {"type": "string"},
        "partitions": {"type": "array", "items": {"type": "string"}},
        "features": {"type": "array", "items": {"type": "string"}},
        "reservation": {"type": "string", "description": "The advance reservation in force on it"},
        "reboot": {"enum": ["requested", "issued"], "description": "A reboot asked for (scontrol reboot): requested, or issued (the reboot program runs)"},
        "registered": {"$ref": "#/components/schemas/i64", "description": "When it first registered, Unix seconds"},
        "agent_started": {"$ref": "#/components/schemas/i64", "description": "When its agent last registered, Unix seconds"}}},
      "RebootRequest": {"type": "object", "additionalProperties": false, "required": ["nodes"], "properties": {
        "nodes": {"type": "string", "minLength": 1, "maxLength": 1048576, "description": "A hostlist, or ALL"},
        "asap": {"type": "boolean", "description": "Drain the nodes now, so they empty (ASAP)"},
        "next_state": {"enum": ["resume", "down", null], "description": "The nodes' state after the reboot (absent: as before it; resume with asap)"},
        "reason": {"$ref": "#/components/schemas/StringOrNull", "description": "The nodes' reason meanwhile"}}},
      "CancelRebootRequest": {"type": "object", "additionalProperties": false, "required": ["nodes"], "properties": {
        "nodes": {"type": "string", "minLength": 1, "maxLength": 1048576, "description": "A hostlist, or ALL"}}},
      "ConfigInfo": {"type": "object", "additionalProperties": false,
        "required": ["cluster_name", "kill_wait", "lease", "max_array", "min_job_age", "scheduler", "partitions", "qos"], "properties": {
        "cluster_name": {"type": "string"}, "kill_wait": {"$ref": "#/components/schemas/i64"}, "lease": {"$ref": "#/components/schemas/i64"},
        "max_array": {"$ref": "#/components/schemas/u32"}, "min_job_age": {"$ref": "#/components/schemas/i64"},
        "scheduler": {"type": "string", "description": "sched/backfill or sched/builtin"},
        "partitions": {"type": "array", "items": {"$ref": "#/components/schemas/PartitionInfo"}, "description": "The default first"},
        "qos": {"type": "array", "items": {"type": "string"}, "description": "The default first"},
        "max_script_size": {"$ref": "#/components/schemas/u64", "description": "The largest batch script, bytes (absent from older controllers)"},
        "mpi_default": {"type": "string", "enum": ["pmi2", "pmix"], "description": "Slurm's MpiDefault: srun's MPI type when it names none (absent: none)"},
        "job_submit": {"type": "string", "description": "The site's job_submit.lua (JobSubmitPlugins=lua; absent: none)"},
        "reboot_program": {"type": "string", "description": "Slurm's RebootProgram (absent: none)"},
        "resume_timeout": {"$ref": "#/components/schemas/i64", "description": "Slurm's ResumeTimeout, seconds"},
        "log_filter": {"type": "string", "description": "The controller's log filter (SlurmctldDebug; absent from older controllers)"}}},
      "ClusterStatus": {"type": "object", "additionalProperties": false,
        "required": ["controller", "serving_since", "starts", "store", "jobs_pending", "jobs_running", "nodes", "nodes_up"], "properties": {
        "controller": {"type": "string", "description": "The controller's address (with etcd: the leader's, as standbys give it)"},
        "serving_since": {"$ref": "#/components/schemas/i64", "description": "Since when it serves (with etcd: leads), Unix seconds"},
        "starts": {"$ref": "#/components/schemas/u64", "description": "The cluster's start count (raised by each start and each new leader)"},
        "store": {"type": "string", "enum": ["sqlite", "etcd"]},
        "etcd": {"$ref": "#/components/schemas/EtcdStatus"},
        "jobs_pending": {"$ref": "#/components/schemas/u64"}, "jobs_running": {"$ref": "#/components/schemas/u64"},
        "nodes": {"$ref": "#/components/schemas/u64"}, "nodes_up": {"$ref": "#/components/schemas/u64"}}},
      "EtcdStatus": {"type": "object", "additionalProperties": false,
        "required": ["prefix", "leaderships", "commits", "commit_seconds_mean", "members"], "properties": {
        "prefix": {"type": "string"},
        "leaderships": {"$ref": "#/components/schemas/u64", "description": "Times a controller has taken the lead of this cluster"},
        "commits": {"$ref": "#/components/schemas/u64", "description": "Commits this leader made"},
        "commit_seconds_mean": {"type": "number"},
        "members": {"type": "array", "items": {"$ref": "#/components/schemas/EtcdMember"}}}},
      "EtcdMember": {"type": "object", "additionalProperties": false,
        "required": ["endpoint", "version", "db_bytes", "db_bytes_in_use", "leader", "has_leader", "errors"], "properties": {
        "endpoint": {"type": "string"}, "error": {"type": "string", "description": "Why it did not answer"},
        "version": {"type": "string"}, "db_bytes": {"$ref": "#/components/schemas/i64"},
        "db_bytes_in_use": {"$ref": "#/components/schemas/i64", "description": "Of db_bytes, in use (the rest is returned by a defragmentation)"},
        "leader": {"type": "boolean", "description": "Whether it is etcd's leader"}, "has_leader": {"type": "boolean"},
        "errors": {"type": "array", "items": {"type": "string"}, "description": "Alarms (NOSPACE: the quota is reached)"}}},
      "PartitionInfo": {"type": "object", "additionalProperties": false,
        "required": ["name", "default", "default_time", "max_time", "priority_tier", "nodes"], "properties": {
        "name": {"type": "string"}, "default": {"type": "boolean"},
        "default_time": {"$ref": "#/components/schemas/i64OrNull", "description": "Seconds; null: unlimited"},
        "max_time": {"$ref": "#/components/schemas/i64OrNull", "description": "Seconds; null: unlimited"},
        "priority_tier": {"$ref": "#/components/schemas/u32"},
        "nodes": {"oneOf": [{"type": "null"}, {"type": "array", "items": {"type": "string"}}], "description": "null: every node"}}},
      "NodeAction": {"type": "object", "required": ["state"], "properties": {
        "state": {"type": "string", "description": "drain, or resume (idle), in any case", "pattern": "^([Dd][Rr][Aa][Ii][Nn]|[Rr][Ee][Ss][Uu][Mm][Ee]|[Ii][Dd][Ll][Ee])$"},
        "reason": {"$ref": "#/components/schemas/StringOrNull"}}},
      "PriorityRow": {"description": "Job id and its priority breakdown", "type": "array", "prefixItems": [{"$ref": "#/components/schemas/u64"}, {"$ref": "#/components/schemas/Breakdown"}], "items": false, "minItems": 2},
      "Breakdown": {"type": "object", "additionalProperties": false,
        "required": ["age", "fairshare", "job_size", "time_limit", "xfactor", "starving", "partition", "qos", "nice", "total"],
        "properties": {"age": {"type": "number"}, "fairshare": {"type": "number"}, "job_size": {"type": "number"}, "time_limit": {"type": "number"}, "xfactor": {"type": "number"},
          "starving": {"type": "number"}, "partition": {"type": "number"}, "qos": {"type": "number"}, "nice": {"type": "number"}, "total": {"type": "number"}}},

      "Node": {"type": "object", "required": ["name", "cpus", "memory", "gpus", "other", "features", "partitions", "switch", "block", "state"], "properties": {
        "name": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
        "cpus": {"$ref": "#/components/schemas/u32"},
        "memory": {"$ref": "#/components/schemas/u64", "description": "Bytes"},
        "gpus": {"type": "integer", "minimum": 0, "maximum": 256, "description": "GPUs are numbered 0 to 255"},
        "gpu_type": {"$ref": "#/components/schemas/StringOrNull"},
        "other": {"type": "array", "items": {"$ref": "#/components/schemas/Count"}},
        "features": {"$ref": "#/components/schemas/Strings"},
        "partitions": {"$ref": "#/components/schemas/Strings", "description": "Ignored: the controller's configuration decides"},
        "switch": {"$ref": "#/components/schemas/u32"},
        "block": {"$ref": "#/components/schemas/u32"},
        "state": {"enum": ["Up", "Drain", "Down"]}}},
      "JoinTokensRequest": {"type": "object", "additionalProperties": false, "properties": {
        "count": {"type": ["integer", "null"], "minimum": 1, "maximum": 100000, "description": "How many (default 1)"},
        "lifetime": {"type": ["integer", "null"], "minimum": 1, "maximum": 2592000, "description": "Seconds each is valid (default 3600)"}}},
      "JoinTokens": {"type": "object", "required": ["tokens", "expires"], "additionalProperties": false, "properties": {
        "tokens": {"type": "array", "items": {"type": "string"}},
        "expires": {"$ref": "#/components/schemas/i64", "description": "Unix seconds"},
        "server": {"type": ["string", "null"], "description": "The controller's TCP address as clients reach it (`https://ADDR`; an unspecified listen address reads as loopback), for `tandem token --kubeconfig`"},
        "ca_pem": {"type": ["string", "null"], "description": "The cluster CA's certificate (PEM), when the TCP port serves TLS"}}},
      "JoinRequest": {"type": "object", "required": ["name"], "additionalProperties": false, "properties": {
        "name": {"type": "string", "description": "The node's name: 1 to 64 of A-Za-z0-9-_."}}},
      "ProxyCredentialRequest": {"type": "object", "required": ["name"], "additionalProperties": false, "properties": {
        "name": {"type": "string", "description": "The proxy's name: 1 to 64 of A-Za-z0-9-_."}}},
      "Credential": {"type": "object", "required": ["credential"], "additionalProperties": false, "properties": {
        "credential": {"type": "string", "description": "Sent as `Authorization: Bearer CREDENTIAL`"}}},
      "RegisterRequest": {"type": "object", "required": ["node", "addr"], "properties": {
        "node": {"$ref": "#/components/schemas/Node"},
        "addr": {"type": "string", "description": "Address other nodes reach it at"},
        "running": {"type": "array", "items": {"$ref": "#/components/schemas/TaskKey"}, "description": "The tasks it runs, adopted ones included: every other run placed here ends at once"},
        "exits": {"type": "array", "items": {"$ref": "#/components/schemas/TaskExit"}, "description": "Tasks that ended and were not reported yet"},
        "version": {"type": "string", "description": "The agent's release, MAJOR.MINOR.PATCH (absent: 0.1, agents from before releases were sent)"}}},
      "RegisterResponse": {"type": "object", "required": ["lease_s", "heartbeat_ms"], "additionalProperties": false, "properties": {
        "lease_s": {"$ref": "#/components/schemas/i64"}, "heartbeat_ms": {"$ref": "#/components/schemas/u64"},
        "prolog": {"$ref": "#/components/schemas/StringOrNull", "description": "The node-local prolog the agent runs before a job's first task on its node"},
        "epilog": {"$ref": "#/components/schemas/StringOrNull", "description": "The node-local epilog the agent runs once a job's run on its node is over"},
        "prolog_epilog_timeout_s": {"$ref": "#/components/schemas/u64", "description": "A prolog or epilog running longer is killed and fails (0: no limit)"},
        "health_check_program": {"$ref": "#/components/schemas/StringOrNull", "description": "The node-local health check, run as root"},
        "health_check_interval_s": {"$ref": "#/components/schemas/u64", "description": "Seconds between health checks (0: never)"},
        "health_check_node_state": {"enum": ["any", "idle", "alloc", null], "description": "When the check runs (absent: any)"},
        "gpu_health_check": {"type": "boolean", "description": "The built-in GPU check runs at each health check turn"}}},
      "TaskKey": {"type": "object", "required": ["job", "epoch", "step", "rank"], "properties": {
        "job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
        "step": {"$ref": "#/components/schemas/u32"}, "rank": {"$ref": "#/components/schemas/u32"}}},
      "TaskExit": {"type": "object", "required": ["job", "epoch", "step", "rank", "code", "signal", "oom"], "properties": {
        "job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
        "step": {"$ref": "#/components/schemas/u32"}, "rank": {"$ref": "#/components/schemas/u32"},
        "code": {"$ref": "#/components/schemas/i32OrNull"}, "signal": {"$ref": "#/components/schemas/i32OrNull"},
        "oom": {"type": "boolean"}, "fenced": {"type": "boolean"},
        "error": {"$ref": "#/components/schemas/StringOrNull", "description": "Why it never started"},
        "lost": {"type": "boolean", "description": "How it ended is not known (it outlived its agent and its keeper): a node failure for its job"},
        "prolog_failed": {"type": "boolean", "description": "It never started: the node's prolog failed (the node is drained, the job requeued)"}}},
      "ReplicaReport": {"type": "object", "required": ["job", "epoch", "port", "ready", "restarts", "crashloop"], "properties": {
        "job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
        "port": {"$ref": "#/components/schemas/u16"}, "ready": {"type": "boolean"},
        "restarts": {"$ref": "#/components/schemas/u32"}, "crashloop": {"type": "boolean"},
        "message": {"$ref": "#/components/schemas/StringOrNull"}}},
      "Heartbeat": {"type": "object", "required": ["node", "ack", "running", "exits", "wait_ms"], "properties": {
        "node": {"type": "string"},
        "ack": {"$ref": "#/components/schemas/u64", "description": "Highest order sequence number received"},
        "running": {"type": "array", "items": {"$ref": "#/components/schemas/TaskKey"}},
        "exits": {"type": "array", "items": {"$ref": "#/components/schemas/TaskExit"}},
        "wait_ms": {"$ref": "#/components/schemas/u64"},
        "replicas": {"type": "array", "items": {"$ref": "#/components/schemas/ReplicaReport"}},
        "usage": {"type": "array", "description": "Running tasks' usage, for sstat", "items": {"type": "object", "additionalProperties": false,
          "required": ["key", "rss_kb", "max_rss_kb", "cpu_ms"], "properties": {"key": {"$ref": "#/components/schemas/TaskKey"},
            "rss_kb": {"$ref": "#/components/schemas/u64"}, "max_rss_kb": {"$ref": "#/components/schemas/u64"}, "cpu_ms": {"$ref": "#/components/schemas/u64"}}}},
        "pulling": {"type": "array", "description": "Tasks whose image the agent is pulling: their jobs show as CONFIGURING", "items": {"type": "object", "additionalProperties": false,
          "required": ["key", "progress"], "properties": {"key": {"$ref": "#/components/schemas/TaskKey"}, "progress": {"type": "string"}}}},
        "drain": {"$ref": "#/components/schemas/StringOrNull", "description": "The node drains itself with this reason (its prolog or epilog failed)"},
        "health_failed": {"$ref": "#/components/schemas/StringOrNull", "description": "Its health check failed, saying this: the node drains"},
        "health_down": {"type": "boolean", "description": "The failed check marks the node down instead (the program exited 2): its jobs are requeued or fail"},
        "health_passed": {"type": "boolean", "description": "Its health check passed: a drain the check made is undone"},
        "frozen": {"type": "array", "description": "Runs it holds suspended (scontrol suspend): job, run number",
          "items": {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/u64"}, {"$ref": "#/components/schemas/u32"}], "items": false, "minItems": 2}},
        "started": {"type": "array", "description": "Batch steps started since its last answered heartbeat, each with the Unix second it started (the run's start in accounting)",
          "items": {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/TaskKey"}, {"$ref": "#/components/schemas/i64"}], "items": false, "minItems": 2}}}},
      "Orders": {"type": "object", "required": ["orders"], "additionalProperties": false, "properties": {
        "orders": {"type": "array", "items": {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/u64"}, {"$ref": "#/components/schemas/Order"}], "items": false, "minItems": 2}}}},
      "Order": {"oneOf": [
        {"type": "object", "required": ["Launch"], "additionalProperties": false, "properties": {"Launch": {"$ref": "#/components/schemas/Task"}}},
        {"type": "object", "required": ["Signal"], "additionalProperties": false, "properties": {"Signal": {"type": "object", "additionalProperties": false,
          "required": ["job", "epoch", "signal", "batch_only"], "properties": {"job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
            "signal": {"$ref": "#/components/schemas/i32"}, "batch_only": {"type": "boolean"},
            "step": {"$ref": "#/components/schemas/u32", "description": "Only this step's tasks (absent: every step's)"}}}}},
        {"type": "object", "required": ["Kill"], "additionalProperties": false, "properties": {"Kill": {"type": "object", "additionalProperties": false,
          "required": ["job", "epoch"], "properties": {"job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"}}}}},
        {"type": "object", "required": ["Attach"], "additionalProperties": false, "properties": {"Attach": {"type": "object", "additionalProperties": false,
          "description": "Connect a running step's task I/O to one more listener (sattach)",
          "required": ["job", "epoch", "step", "io"], "properties": {"job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
            "step": {"$ref": "#/components/schemas/u32"}, "io": {"$ref": "#/components/schemas/StepIo"}}}}},
        {"type": "object", "required": ["Output"], "additionalProperties": false, "properties": {"Output": {"type": "object", "additionalProperties": false,
          "description": "Send a run's output files to the controller (kubectl logs), read as the job's user, on a connection of its own: POST /v1/agent/output/{id}",
          "required": ["job", "epoch", "read"], "properties": {"job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
            "read": {"type": "object", "additionalProperties": false,
              "required": ["id", "key", "files", "uid", "gid", "follow", "tail_lines", "limit_bytes"],
              "properties": {"id": {"$ref": "#/components/schemas/u64"}, "key": {"type": "string", "description": "64 hex digits, presented with the output"},
                "files": {"$ref": "#/components/schemas/Strings"}, "uid": {"$ref": "#/components/schemas/u32"}, "gid": {"$ref": "#/components/schemas/u32"},
                "follow": {"type": "boolean", "description": "Go on until the run's tasks on this node have ended"},
                "tail_lines": {"oneOf": [{"$ref": "#/components/schemas/u64"}, {"type": "null"}]},
                "limit_bytes": {"oneOf": [{"$ref": "#/components/schemas/u64"}, {"type": "null"}]}}}}}}},
        {"type": "object", "required": ["Epilog"], "additionalProperties": false, "properties": {"Epilog": {"type": "object", "additionalProperties": false,
          "description": "A run is over on this node: run the epilog once its tasks here are gone",
          "required": ["job", "epoch", "env"], "properties": {"job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
            "env": {"type": "array", "items": {"$ref": "#/components/schemas/StringPair"}}}}}},
        {"type": "object", "required": ["Suspend"], "additionalProperties": false, "properties": {"Suspend": {"type": "object", "additionalProperties": false,
          "description": "Freeze every process of a run through its cgroup (scontrol suspend)",
          "required": ["job", "epoch"], "properties": {"job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"}}}}},
        {"type": "object", "required": ["Resume"], "additionalProperties": false, "properties": {"Resume": {"type": "object", "additionalProperties": false,
          "description": "Thaw a suspended run",
          "required": ["job", "epoch"], "properties": {"job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"}}}}},
        {"type": "object", "required": ["Reboot"], "additionalProperties": false, "properties": {"Reboot": {"type": "object", "additionalProperties": false,
          "description": "Run the site's reboot program (scontrol reboot); the node is idle and takes no work until the agent registers again",
          "required": ["program"], "properties": {"program": {"type": "string"}}}}}]},
      "Task": {"type": "object", "additionalProperties": false,
        "required": ["job", "epoch", "step", "rank", "script", "argv", "env", "workdir", "stdout", "stderr", "uid", "gid", "gpus", "mem_limit", "replica"],
        "properties": {
          "job": {"$ref": "#/components/schemas/u64"}, "epoch": {"$ref": "#/components/schemas/u32"},
          "step": {"$ref": "#/components/schemas/u32"}, "rank": {"$ref": "#/components/schemas/u32"},
          "script": {"$ref": "#/components/schemas/StringOrNull", "description": "The batch script (batch step), or null for a command"},
          "argv": {"$ref": "#/components/schemas/Strings"},
          "env": {"type": "array", "items": {"$ref": "#/components/schemas/StringPair"}},
          "workdir": {"type": "string"}, "stdout": {"type": "string"}, "stderr": {"type": "string"},
          "uid": {"$ref": "#/components/schemas/u32"}, "gid": {"$ref": "#/components/schemas/u32"},
          "gpus": {"type": "array", "items": {"$ref": "#/components/schemas/u8"}},
          "mem_limit": {"$ref": "#/components/schemas/u64"},
          "step_mem": {"$ref": "#/components/schemas/u64", "description": "srun --mem: the step's own limit on this node (0: the job's only)"},
          "cpu_limit": {"$ref": "#/components/schemas/u32", "description": "The job's CPUs on this node: a cgroup v2 agent's cpu.max quota (absent: no limit)"},
          "cpus": {"type": "array", "items": {"$ref": "#/components/schemas/u32"}, "description": "CPUs the task is bound to (srun --cpu-bind; absent: unbound)"},
          "login_env": {"type": "boolean", "description": "--get-user-env: the batch script starts from the user's login environment"},
          "umask": {"type": "integer", "minimum": 0, "maximum": 511, "description": "The task's umask; its output files are created 0666 under it (absent: 0022)"},
          "truncate": {"type": "boolean", "description": "Empty the output and error files as they are opened"},
          "replica": {"anyOf": [{"$ref": "#/components/schemas/ReplicaTask"}, {"type": "null"}]},
          "io": {"anyOf": [{"$ref": "#/components/schemas/StepIo"}, {"type": "null"}]},
          "container": {"anyOf": [{"$ref": "#/components/schemas/Container"}, {"type": "null"}]},
          "script_env": {"type": "array", "items": {"$ref": "#/components/schemas/StringPair"}, "description": "The prolog's environment for this run (absent: no prolog)"},
          "task_scripts": {"type": "object", "additionalProperties": false, "description": "The site's task prolog and epilog, run as the user around this task (absent: none)",
            "properties": {"prolog": {"type": "string"}, "epilog": {"type": "string"}, "timeout_s": {"$ref": "#/components/schemas/u64"}}}}},
      "ReplicaTask": {"type": "object", "additionalProperties": false, "required": ["service", "replica", "readiness", "liveness", "startup", "grace_ms"], "properties": {
        "service": {"type": "string"}, "replica": {"type": "string"},
        "readiness": {"anyOf": [{"$ref": "#/components/schemas/Probe"}, {"type": "null"}]},
        "liveness": {"anyOf": [{"$ref": "#/components/schemas/Probe"}, {"type": "null"}]},
        "startup": {"anyOf": [{"$ref": "#/components/schemas/Probe"}, {"type": "null"}]},
        "grace_ms": {"$ref": "#/components/schemas/u64"}}},
      "Probe": {"type": "object", "additionalProperties": false,
        "required": ["kind", "port", "period_ms", "timeout_ms", "failure_threshold", "success_threshold", "initial_delay_ms"], "properties": {
        "kind": {"oneOf": [{"const": "Tcp"}, {"type": "object", "required": ["Http"], "additionalProperties": false, "properties": {"Http": {"type": "string"}}}]},
        "port": {"anyOf": [{"$ref": "#/components/schemas/u16"}, {"type": "null"}]},
        "period_ms": {"$ref": "#/components/schemas/u64"}, "timeout_ms": {"$ref": "#/components/schemas/u64"},
        "failure_threshold": {"$ref": "#/components/schemas/u32"}, "success_threshold": {"$ref": "#/components/schemas/u32"},
        "initial_delay_ms": {"$ref": "#/components/schemas/u64"}}},

      "Quantity": {"type": ["number", "string", "null"], "description": "A number, or a string with a unit (`10s`, `256MiB`, `25%`); null: not given"},
      "ServiceSpec": {"type": "object", "additionalProperties": false, "required": ["name", "command"],
        "description": "A service as the user writes it (TOML, YAML or JSON); unknown keys are refused",
        "properties": {
          "name": {"type": "string", "description": "A DNS label: 1 to 63 lower-case letters, digits and '-', not starting or ending with '-'",
            "pattern": "^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
          "command": {"type": "array", "items": {"type": "string"}, "minItems": 1, "description": "Program and arguments; $PORT is the replica's port"},
          "args": {"$ref": "#/components/schemas/Strings"},
          "env": {"type": "object", "additionalProperties": {"type": "string"}, "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}},
          "workdir": {"type": ["string", "null"], "pattern": "^/", "description": "An absolute path (default: where it was applied from)"},
          "output": {"$ref": "#/components/schemas/StringOrNull"},
          "resources": {"type": "object", "additionalProperties": false, "properties": {
            "cpus": {"$ref": "#/components/schemas/Quantity"}, "memory": {"$ref": "#/components/schemas/Quantity"},
            "gpus": {"$ref": "#/components/schemas/Quantity"}, "gpu_type": {"$ref": "#/components/schemas/StringOrNull"}}},
          "replicas": {"$ref": "#/components/schemas/Quantity"},
          "autoscale": {"anyOf": [{"type": "null"}, {"type": "object", "additionalProperties": false, "properties": {
            "min": {"$ref": "#/components/schemas/Quantity"}, "max": {"$ref": "#/components/schemas/Quantity"},
            "target_inflight": {"$ref": "#/components/schemas/Quantity"}, "scale_down_window": {"$ref": "#/components/schemas/Quantity"}}}]},
          "qos": {"$ref": "#/components/schemas/StringOrNull"},
          "partition": {"$ref": "#/components/schemas/StringOrNull"},
          "account": {"$ref": "#/components/schemas/StringOrNull"},
          "readiness": {"$ref": "#/components/schemas/ProbeSpec"},
          "liveness": {"$ref": "#/components/schemas/ProbeSpec"},
          "startup": {"$ref": "#/components/schemas/ProbeSpec"},
          "rolling_update": {"type": "object", "additionalProperties": false, "properties": {
            "max_surge": {"$ref": "#/components/schemas/Quantity"}, "max_unavailable": {"$ref": "#/components/schemas/Quantity"}}},
          "min_available": {"$ref": "#/components/schemas/Quantity"},
          "proxy": {"type": "object", "additionalProperties": false, "properties": {
            "balance": {"$ref": "#/components/schemas/StringOrNull", "description": "round_robin (default), least_request, p2c or llm"},
            "retries": {"$ref": "#/components/schemas/Quantity"}, "hold": {"$ref": "#/components/schemas/Quantity"},
            "resume_streams": {"$ref": "#/components/schemas/BoolOrNull", "description": "Streaming OpenAI completions go on on another replica when theirs fails (default false)"},
            "max_concurrency": {"$ref": "#/components/schemas/Quantity", "description": "Requests in flight per replica (balance llm); more wait in the proxy's fair queue"},
            "max_wait": {"$ref": "#/components/schemas/Quantity", "description": "Bound on the wait in the fair queue (default 10s); longer expected waits get 429"},
            "tenant_header": {"$ref": "#/components/schemas/StringOrNull", "description": "Header whose value names the request's tenant"},
            "prefill_pace": {"$ref": "#/components/schemas/Quantity", "description": "Streamed requests per replica awaiting their first token before the proxy sends it another queued one (default 1; 0: not paced)"},
            "tenants": {"type": "object", "description": "Tenants of the fair queue by name", "additionalProperties": {"type": "object", "additionalProperties": false, "properties": {
              "weight": {"$ref": "#/components/schemas/Quantity"}, "keys": {"$ref": "#/components/schemas/Strings", "description": "API keys (Authorization: Bearer KEY)"}}}}}},
          "termination_grace": {"$ref": "#/components/schemas/Quantity"},
          "image": {"$ref": "#/components/schemas/StringOrNull", "description": "The OCI image the replicas run in (--container-image's forms)"},
          "mounts": {"$ref": "#/components/schemas/Strings", "description": "Host paths bound into the image, SRC:DST[:ro] each"},
          "restarted_at": {"type": ["string", "null"], "description": "A restart marker: a new value makes a new revision whose replicas replace the running ones, nothing else changed (kubectl rollout restart sets it)"}}},
      "ProbeSpec": {"anyOf": [{"type": "null"}, {"type": "object", "additionalProperties": false, "properties": {
        "http": {"$ref": "#/components/schemas/StringOrNull"}, "tcp": {"$ref": "#/components/schemas/BoolOrNull"},
        "port": {"$ref": "#/components/schemas/Quantity"}, "period": {"$ref": "#/components/schemas/Quantity"},
        "timeout": {"$ref": "#/components/schemas/Quantity"}, "failure_threshold": {"$ref": "#/components/schemas/Quantity"},
        "success_threshold": {"$ref": "#/components/schemas/Quantity"}, "initial_delay": {"$ref": "#/components/schemas/Quantity"}}}]},
      "ApplyRequest": {"type": "object", "additionalProperties": false, "required": ["spec", "cwd"], "properties": {
        "spec": {"$ref": "#/components/schemas/ServiceSpec"},
        "cwd": {"type": "string", "description": "Where it was applied from: the default workdir"},
        "umask": {"$ref": "#/components/schemas/u32OrNull", "description": "The applying command's umask, the replicas' (null or absent: 0022)"}}},
      "ApplyResponse": {"type": "object", "additionalProperties": false, "required": ["name", "revision", "changed"], "properties": {
        "name": {"type": "string"}, "revision": {"$ref": "#/components/schemas/u32"}, "changed": {"type": "boolean"},
        "user_msg": {"$ref": "#/components/schemas/StringOrNull", "description": "The site's job-submit policy's message to the user (slurm.log_user)"}}},
      "ServiceAction": {"oneOf": [
        {"type": "object", "additionalProperties": false, "required": ["action", "replicas"], "properties": {"action": {"const": "scale"}, "replicas": {"$ref": "#/components/schemas/u32"}}},
        {"type": "object", "additionalProperties": false, "required": ["action"], "properties": {"action": {"const": "undo"}, "revision": {"$ref": "#/components/schemas/u32OrNull", "description": "Default: the previous revision"}}}]},
      "ServiceActionResponse": {"type": "object", "additionalProperties": false, "required": ["name", "revision"], "properties": {
        "name": {"type": "string"}, "revision": {"$ref": "#/components/schemas/u32OrNull", "description": "After an undo, the new revision"}}},
      "ServiceInfo": {"type": "object", "additionalProperties": false,
        "required": ["name", "user", "revision", "history", "desired", "ready", "updated_ready", "replicas", "deleting", "scale_log", "stats", "spec"],
        "properties": {
          "name": {"type": "string"}, "user": {"type": "string"},
          "revision": {"$ref": "#/components/schemas/u32"},
          "history": {"type": "array", "items": {"$ref": "#/components/schemas/u32"}, "description": "Earlier revisions kept for undo"},
          "desired": {"$ref": "#/components/schemas/u32"}, "ready": {"$ref": "#/components/schemas/u32"}, "updated_ready": {"$ref": "#/components/schemas/u32"},
          "replicas": {"type": "array", "items": {"$ref": "#/components/schemas/ReplicaRow"}},
          "deleting": {"type": "boolean"},
          "scale_log": {"type": "array", "description": "Desired count over time: Unix milliseconds and count", "items": {"type": "array", "prefixItems": [{"$ref": "#/components/schemas/i64"}, {"$ref": "#/components/schemas/u32"}], "items": false, "minItems": 2}},
          "stats": {"$ref": "#/components/schemas/ProxyServiceStats"},
          "spec": {"$ref": "#/components/schemas/ServiceSpec", "description": "The current revision's spec; another user's env values and args read (hidden)"}}},
      "ReplicaRow": {"type": "object", "additionalProperties": false,
        "required": ["id", "job", "state", "revision", "node", "addr", "restarts", "message", "reason", "log"],
        "properties": {
          "id": {"type": "string"}, "job": {"$ref": "#/components/schemas/u64"}, "state": {"type": "string"},
          "revision": {"$ref": "#/components/schemas/u32"}, "node": {"$ref": "#/components/schemas/StringOrNull"},
          "addr": {"$ref": "#/components/schemas/StringOrNull"}, "restarts": {"$ref": "#/components/schemas/u32"},
          "message": {"$ref": "#/components/schemas/StringOrNull"}, "reason": {"type": "string"}, "log": {"type": "string"}}},
      "ProxyServiceStats": {"type": "object", "description": "A proxy's gauges and counters for one service (every field may be left out)", "properties": {
        "inflight": {"$ref": "#/components/schemas/u64"}, "waiting": {"$ref": "#/components/schemas/u64"},
        "requests": {"$ref": "#/components/schemas/u64"}, "failures": {"$ref": "#/components/schemas/u64"},
        "replicas": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/u64"}, "description": "In flight per replica"}}},
      "ProxySync": {"type": "object", "required": ["proxy"], "properties": {
        "proxy": {"type": "string", "minLength": 1, "maxLength": 256, "description": "The proxy's listen address (1 to 256 bytes)"},
        "since": {"$ref": "#/components/schemas/u64", "description": "The view version the proxy holds (0: none)"},
        "wait_ms": {"$ref": "#/components/schemas/u64"},
        "services": {"type": "object", "additionalProperties": {"$ref": "#/components/schemas/ProxyServiceStats"}}}},
      "EndpointView": {"type": "object", "required": ["version", "services", "changed_ms"], "properties": {
        "version": {"$ref": "#/components/schemas/u64"},
        "services": {"type": "array", "items": {"$ref": "#/components/schemas/ServiceEndpoints"}},
        "changed_ms": {"$ref": "#/components/schemas/i64"}}},
      "ServiceEndpoints": {"type": "object", "required": ["name", "balance", "hold_ms", "retries", "endpoints", "draining"], "properties": {
        "name": {"type": "string"}, "balance": {"type": "string"},
        "hold_ms": {"$ref": "#/components/schemas/u64"}, "retries": {"$ref": "#/components/schemas/u32"},
        "resume_streams": {"type": "boolean", "description": "Streaming OpenAI completions go on on another replica when theirs fails"},
        "endpoints": {"type": "array", "items": {"type": "object", "required": ["replica", "addr", "node"], "properties": {
          "replica": {"type": "string"}, "addr": {"type": "string"}, "node": {"type": "string"}}}},
        "draining": {"$ref": "#/components/schemas/Strings"},
        "max_concurrency": {"$ref": "#/components/schemas/u32", "description": "Requests in flight per replica before the proxy queues (0: no limit)"},
        "max_wait_ms": {"$ref": "#/components/schemas/u64"},
        "tenant_header": {"$ref": "#/components/schemas/StringOrNull"},
        "prefill_pace": {"$ref": "#/components/schemas/u32", "description": "Streamed requests per replica awaiting their first token before the proxy sends it another (0: not paced)"},
        "tenants": {"type": "array", "items": {"type": "object", "required": ["name", "weight", "keys"], "properties": {
          "name": {"type": "string"}, "weight": {"$ref": "#/components/schemas/u32"}, "keys": {"$ref": "#/components/schemas/Strings"}}}}}}
    }
  }
}"##;

#[cfg(test)]
mod tests {
    use super::DOCUMENT;
    use crate::*;
    use control::service::{Probe, ProbeKind, ProbeSpec, Quantity};
    use control::{Endpoint, ReplicaReport, ReplicaTask, Task};
    use model::{DepKind, Dependency, GpuPer, GpuRequest, JobId, MemRequest};
    use serde_json::Value;
    use std::collections::BTreeSet;

    fn doc() -> Value {
        serde_json::from_str(DOCUMENT).expect("the document is JSON")
    }

    fn resolve<'a>(doc: &'a Value, r: &str) -> &'a Value {
        let p = r.strip_prefix('#').unwrap_or_else(|| panic!("$ref {r} is not local"));
        doc.pointer(p).unwrap_or_else(|| panic!("$ref {r} does not resolve"))
    }

    fn int(v: &Value) -> Option<i128> {
        v.as_u64().map(i128::from).or_else(|| v.as_i64().map(i128::from))
    }

    fn type_ok(t: &str, v: &Value) -> bool {
        match t {
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            "integer" => int(v).is_some(),
            "number" => v.is_number(),
            "string" => v.is_string(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            other => panic!("unknown type {other}"),
        }
    }

    /// What is wrong with `v` under `schema`, in the part of JSON Schema the document uses
    /// (`pattern` is not checked). Strict: where a schema lists `properties`, the value must
    /// have exactly those keys, so a field added to or removed from a wire type without the
    /// document is caught.
    fn check(doc: &Value, schema: &Value, v: &Value, at: &str, errs: &mut Vec<String>) {
        if let Some(b) = schema.as_bool() {
            if !b {
                errs.push(format!("{at}: no value allowed, got {v}"));
            }
            return;
        }
        let s = schema.as_object().unwrap_or_else(|| panic!("{at}: a schema must be an object"));
        if let Some(r) = s.get("$ref") {
            check(doc, resolve(doc, r.as_str().expect("$ref is a string")), v, at, errs);
        }
        if let Some(t) = s.get("type") {
            let types: Vec<&str> = match t {
                Value::String(x) => vec![x.as_str()],
                Value::Array(a) => a.iter().map(|x| x.as_str().expect("type name")).collect(),
                _ => panic!("{at}: bad type"),
            };
            if !types.iter().any(|t| type_ok(t, v)) {
                errs.push(format!("{at}: {v} is not of type {types:?}"));
                return;
            }
        }
        if let Some(e) = s.get("enum")
            && !e.as_array().expect("enum is an array").contains(v)
        {
            errs.push(format!("{at}: {v} is not one of {e}"));
        }
        if let Some(c) = s.get("const")
            && c != v
        {
            errs.push(format!("{at}: {v} is not {c}"));
        }
        if let (Some(min), Some(x)) = (s.get("minimum").and_then(int), int(v))
            && x < min
        {
            errs.push(format!("{at}: {x} is below {min}"));
        }
        if let (Some(max), Some(x)) = (s.get("maximum").and_then(int), int(v))
            && x > max
        {
            errs.push(format!("{at}: {x} is above {max}"));
        }
        if let Some(text) = v.as_str() {
            let n = text.chars().count() as u64;
            if s.get("minLength").and_then(Value::as_u64).is_some_and(|m| n < m)
                || s.get("maxLength").and_then(Value::as_u64).is_some_and(|m| n > m)
            {
                errs.push(format!("{at}: {v} has the wrong length"));
            }
        }
        if let Some(a) = v.as_array() {
            if s.get("minItems").and_then(Value::as_u64).is_some_and(|m| (a.len() as u64) < m) {
                errs.push(format!("{at}: too few items in {v}"));
            }
            let prefix = s.get("prefixItems").and_then(Value::as_array).map_or(&[][..], |p| p.as_slice());
            for (i, x) in a.iter().enumerate() {
                let item = prefix.get(i).or_else(|| s.get("items"));
                if let Some(item) = item {
                    check(doc, item, x, &format!("{at}[{i}]"), errs);
                }
            }
        }
        if let Some(o) = v.as_object() {
            for r in s.get("required").and_then(Value::as_array).into_iter().flatten() {
                if !o.contains_key(r.as_str().expect("required names")) {
                    errs.push(format!("{at}: required {r} is missing"));
                }
            }
            let props = s.get("properties").and_then(Value::as_object);
            if let Some(p) = props {
                for k in p.keys().filter(|k| !o.contains_key(*k)) {
                    errs.push(format!("{at}: documented property {k:?} is not in the value {v}"));
                }
            }
            for (k, x) in o {
                let at = format!("{at}.{k}");
                match props.and_then(|p| p.get(k)) {
                    Some(p) => check(doc, p, x, &at, errs),
                    None if props.is_some() => errs.push(format!("{at}: undocumented property")),
                    None => {
                        if let Some(extra) = s.get("additionalProperties") {
                            check(doc, extra, x, &at, errs);
                        }
                    }
                }
            }
        }
        let branches = |key: &str| -> Option<usize> {
            s.get(key).map(|b| {
                let b = b.as_array().expect("a list of schemas");
                b.iter()
                    .filter(|b| {
                        let mut e = Vec::new();
                        check(doc, b, v, at, &mut e);
                        e.is_empty()
                    })
                    .count()
            })
        };
        if branches("anyOf") == Some(0) {
            errs.push(format!("{at}: {v} matches no anyOf branch"));
        }
        if let Some(n) = branches("oneOf")
            && n != 1
        {
            errs.push(format!("{at}: {v} matches {n} oneOf branches, not one"));
        }
    }

    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                if let Some(Value::String(r)) = o.get("$ref") {
                    out.push(r.clone());
                }
                o.values().for_each(|x| refs(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

    #[test]
    fn the_document_is_consistent() {
        let d = doc();
        assert_eq!(d["openapi"], "3.1.0");
        let mut all = Vec::new();
        refs(&d, &mut all);
        for r in &all {
            resolve(&d, r);
        }
        let schemes = d["components"]["securitySchemes"].as_object().expect("security schemes");
        assert_eq!(schemes["bearerAuth"]["scheme"], "bearer");
        for k in ["joinToken", "nodeCredential", "proxyCredential"] {
            assert_eq!(schemes[k]["scheme"], "bearer", "{k}");
        }
        let mut ids = BTreeSet::new();
        let mut errs = Vec::new();
        for (path, item) in d["paths"].as_object().expect("paths") {
            let item = item.as_object().expect("path item");
            for key in item.keys().filter(|k| *k != "parameters" && *k != "summary" && *k != "description") {
                assert!(METHODS.contains(&key.as_str()), "{path}: {key} is not a method");
            }
            for (method, op) in item.iter().filter(|(k, _)| METHODS.contains(&k.as_str())) {
                let at = format!("{} {path}", method.to_uppercase());
                let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{at}: no operationId"));
                assert!(ids.insert(id.to_string()), "{at}: operationId {id} used twice");
                // Path parameters: exactly the template's, each required.
                let params: Vec<Value> = item
                    .get("parameters")
                    .into_iter()
                    .chain(op.get("parameters"))
                    .flat_map(|p| p.as_array().expect("parameters").clone())
                    .map(|p| match p.get("$ref") {
                        Some(r) => resolve(&d, r.as_str().unwrap()).clone(),
                        None => p,
                    })
                    .collect();
                let declared: BTreeSet<&str> =
                    params.iter().filter(|p| p["in"] == "path").map(|p| p["name"].as_str().expect("parameter name")).collect();
                let template: BTreeSet<&str> =
                    path.split('/').filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}'))).collect();
                if declared != template {
                    errs.push(format!("{at}: path parameters {declared:?}, template {template:?}"));
                }
                for p in &params {
                    if p["in"] == "path" && p["required"] != true {
                        errs.push(format!("{at}: path parameter {} is not required", p["name"]));
                    }
                    if p.get("schema").is_none() {
                        errs.push(format!("{at}: parameter {} has no schema", p["name"]));
                    }
                }
                let responses = op["responses"].as_object().unwrap_or_else(|| panic!("{at}: no responses"));
                if !responses.keys().any(|c| c.starts_with('2')) {
                    errs.push(format!("{at}: no success reply"));
                }
                let security = op.get("security").unwrap_or(&d["security"]).as_array().expect("security");
                let secured = !security.is_empty();
                if secured != responses.contains_key("401") {
                    errs.push(format!("{at}: secured {secured}, but a 401 reply documented {}", responses.contains_key("401")));
                }
                for s in security {
                    for name in s.as_object().expect("requirement").keys() {
                        if !schemes.contains_key(name) {
                            errs.push(format!("{at}: unknown security scheme {name}"));
                        }
                    }
                }
                if op.get("requestBody").is_some() && !responses.contains_key("400") {
                    errs.push(format!("{at}: a body but no 400 reply"));
                }
                for (code, r) in responses {
                    let r = match r.get("$ref") {
                        Some(x) => resolve(&d, x.as_str().unwrap()),
                        None => r,
                    };
                    if code.as_str() >= "400" && r["content"]["application/json"]["schema"]["$ref"] != "#/components/schemas/Error" {
                        errs.push(format!("{at}: the {code} reply is not an Error"));
                    }
                    if r.get("description").is_none() {
                        errs.push(format!("{at}: the {code} reply has no description"));
                    }
                }
            }
        }
        // Links name operations that exist, and parameters those operations have.
        for (path, item) in d["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap().iter().filter(|(k, _)| METHODS.contains(&k.as_str())) {
                for (code, r) in op["responses"].as_object().unwrap() {
                    for (name, link) in r.get("links").and_then(Value::as_object).into_iter().flatten() {
                        let target = link["operationId"].as_str().expect("links name an operationId");
                        let found = d["paths"]
                            .as_object()
                            .unwrap()
                            .iter()
                            .find_map(|(p, item)| item.as_object().unwrap().values().find(|o| o["operationId"] == target).map(|_| p));
                        match found {
                            None => errs.push(format!("{method} {path} {code}: link {name} names no operation {target}")),
                            Some(p) => {
                                for param in link["parameters"].as_object().expect("link parameters").keys() {
                                    if !p.contains(&format!("{{{param}}}")) {
                                        errs.push(format!("{method} {path} {code}: link {name}: {target} has no path parameter {param}"));
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        assert!(errs.is_empty(), "{}", errs.join("\n"));
    }

    fn job_info() -> JobInfo {
        JobInfo {
            id: u64::MAX,
            display_id: "120_3".into(),
            name: "train".into(),
            user: "alice".into(),
            account: "ml".into(),
            partition: "batch".into(),
            qos: "normal".into(),
            state: "RUNNING".into(),
            reason: "None".into(),
            nodelist: "node[1-2]".into(),
            nodes: 2,
            ntasks: 4,
            cpus: 8,
            gpus: 0,
            time_limit: Some(i64::MAX),
            submit: i64::MIN,
            start: Some(1),
            start_estimated: false,
            end: None,
            exit_code: "0:0".into(),
            restarts: u32::MAX,
            workdir: "/home/alice".into(),
            output: "slurm-%j.out".into(),
            steps: vec![StepInfo {
                id: "batch".into(),
                command: "(hidden)".into(),
                name: "batch".into(),
                ntasks: 1,
                nodelist: "node1".into(),
                done: true,
                exit_code: i32::MIN,
                start: 1,
                end: Some(2),
                timed_out: true,
                cpus: 4,
                usage: vec![(0, "node1".into(), 2048, 1500)],
                layout: vec![("node1".into(), 1)],
                error: Some("cannot run x: No such file or directory".into()),
            }],
            recorded: vec![("Comment".into(), "a note".into())],
            message: Some("why".into()),
            uid: 1000,
            gid: 1000,
            array_job_id: Some(120),
            array_task_id: Some(3),
            array_max_running: Some(2),
            array_collapsed: vec![(3, 5), (7, 7)],
            mem_per_node_mb: Some(1024),
            mem_per_cpu_mb: Some(512),
            cpus_per_task: 2,
            cancelled_by: Some(0),
            error: Some("err-%j".into()),
            features: vec!["a100".into()],
            dependency: "afterok:12".into(),
            req_nodes: "node1".into(),
            exc_nodes: "node3".into(),
            nice: -5,
            submit_dir: "/home/alice".into(),
            time_min: Some(600),
            allocation: vec![NodeAllocInfo { name: "node1".into(), cpus: 4, memory_mb: u64::MAX, gpus: 1 }],
            het_job_id: Some(119),
            het_job_offset: Some(1),
            het_size: Some(2),
            reservation: Some("maint".into()),
            suspended: 30,
            suspended_since: Some(1_700_000_100),
        }
    }

    fn batch() -> slurmcli::BatchSpec {
        slurmcli::BatchSpec {
            job_name: Some("train".into()),
            nodes: Some((1, 2)),
            ntasks: Some(4),
            mem: Some(MemRequest::PerCpu(1 << 30)),
            gpus: Some(GpuRequest { per: GpuPer::Task(1), gpu_type: Some("h100".into()), milli: 1000 }),
            gres_other: vec![("nic".into(), 1)],
            constraint: vec!["ib".into()],
            time: Some(Some(60)),
            array: Some(slurmcli::ArraySpec { indices: vec![0, 1, 2], max_running: Some(1) }),
            dependency: vec![
                Dependency { kind: DepKind::AfterOk, job: Some(JobId(7)) },
                Dependency { kind: DepKind::Singleton, job: None },
            ],
            signal: Some(slurmcli::Signal { number: 10, before: 60, batch_only: true }),
            requeue: Some(false),
            mail_type: Some("END,FAIL".into()),
            mail_user: Some("a@b".into()),
            mem_per_gpu: Some(1 << 30),
            cpus_per_gpu: Some(4),
            hint: Some("nomultithread".into()),
            threads_per_core: Some(1),
            get_user_env: Some("10L".into()),
            verbose: 2,
            quiet: true,
            script: "#!/bin/sh\ntrue\n".into(),
            script_args: vec!["a".into()],
            ..Default::default()
        }
    }

    fn probe(kind: ProbeKind) -> Probe {
        Probe { kind, port: Some(u16::MAX), period_ms: 1, timeout_ms: 1, failure_threshold: 3, success_threshold: 1, initial_delay_ms: 0 }
    }

    fn spec() -> control::ServiceSpec {
        let mut s = control::ServiceSpec { name: "llm".into(), command: vec!["serve".into(), "$PORT".into()], ..Default::default() };
        s.env.insert("K".into(), "v".into());
        s.replicas = Some(Quantity::Num(2.0));
        s.resources.memory = Some(Quantity::Text("1GiB".into()));
        s.readiness = Some(ProbeSpec { http: Some("/health".into()), ..Default::default() });
        s.autoscale = Some(Default::default());
        s.proxy.balance = Some("llm".into());
        s.proxy.max_concurrency = Some(Quantity::Num(8.0));
        s.proxy.tenant_header = Some("x-tenant".into());
        s.proxy.prefill_pace = Some(Quantity::Num(2.0));
        s.proxy
            .tenants
            .insert("alice".into(), control::service::TenantSpec { weight: Some(Quantity::Num(2.0)), keys: vec!["sk-a".into()] });
        s
    }

    /// An accounting with every field set somewhere.
    fn accounting() -> AccountingInfo {
        let tres = Tres { cpu: Some(4), mem: Some(1024), node: Some(1), gpu: Some(2) };
        let limits = Limits {
            max_jobs: Some(2),
            max_submit_jobs: Some(10),
            max_wall: Some(3600),
            max_tres_per_job: tres,
            max_tres_per_user: tres,
            grp_jobs: Some(5),
            grp_submit_jobs: Some(50),
            grp_tres: tres,
        };
        AccountingInfo {
            cluster: "tandem".into(),
            enforce: "associations,limits,qos".into(),
            qos: vec![Qos { name: "serve".into(), priority: 100, preempt_tier: 2, limits: limits.clone(), ..Qos::normal() }],
            accounts: vec![Account {
                parent: Some("lab".into()),
                description: "ML".into(),
                organization: "lab".into(),
                qos: vec!["normal".into(), "serve".into()],
                default_qos: Some("normal".into()),
                limits: limits.clone(),
                ..Account::new("ml", 1)
            }],
            users: vec![User {
                name: "alice".into(),
                default_account: "ml".into(),
                admin_level: AdminLevel::Operator,
                coordinator: vec!["lab".into()],
            }],
            assocs: vec![AssocRow {
                account: "ml".into(),
                user: "alice".into(),
                parent: String::new(),
                shares: 1,
                qos: vec!["normal".into()],
                default_qos: "normal".into(),
                limits,
            }],
        }
    }

    fn samples() -> Vec<(&'static str, Value)> {
        let v = |x: &dyn erased::Ser| x.value();
        let stats = ProxyServiceStats { inflight: 1, replicas: [("llm-5".to_string(), 1)].into(), ..Default::default() };
        let task = Task {
            job: 5,
            epoch: 1,
            step: 0,
            rank: 0,
            script: Some("#!/bin/sh\n".into()),
            argv: vec![],
            env: vec![("A".into(), "b".into())],
            workdir: "/".into(),
            stdout: "/o".into(),
            stderr: "/e".into(),
            truncate: true,
            uid: 1000,
            gid: 1000,
            gpus: vec![0, 255],
            mem_limit: 0,
            step_mem: 1 << 30,
            cpu_limit: 2,
            cpus: vec![0, 3],
            login_env: true,
            umask: Some(0o077),
            replica: Some(ReplicaTask {
                service: "llm".into(),
                replica: "llm-5".into(),
                readiness: Some(probe(ProbeKind::Http("/health".into()))),
                liveness: Some(probe(ProbeKind::Tcp)),
                startup: None,
                grace_ms: 30_000,
            }),
            io: Some(control::StepIo {
                addr: "127.0.0.1:4000".into(),
                cert: "-----BEGIN CERTIFICATE-----".into(),
                key: "0".repeat(64),
                stdin: control::StdinTo::Rank(1),
                stdout: true,
                stderr: false,
                pty: false,
                winsize: Some((40, 120)),
                pmi: true,
                pmix: false,
            }),
            container: Some(slurmcli::Container {
                image: "127.0.0.1:5000#bars/busybox:1".into(),
                mounts: vec![slurmcli::Mount { src: "/data".into(), dst: "/data".into(), readonly: true }],
                remap_root: true,
                ..Default::default()
            }),
            script_env: vec![("SLURM_JOB_ID".into(), "5".into()), ("SLURM_SCRIPT_CONTEXT".into(), "prolog_slurmd".into())],
            task_scripts: Some(control::TaskScripts {
                prolog: Some("/etc/tandem/task_prolog".into()),
                epilog: Some("/etc/tandem/task_epilog".into()),
                timeout_s: 60,
            }),
        };
        let exit = control::TaskExit {
            job: 5,
            epoch: 1,
            step: 0,
            rank: 0,
            code: Some(1),
            signal: None,
            oom: false,
            fenced: false,
            error: Some("no such directory".into()),
            lost: true,
            prolog_failed: true,
        };
        let report = ReplicaReport { job: 5, epoch: 1, port: 8000, ready: true, restarts: 0, crashloop: false, message: None };
        let row = ReplicaRow {
            id: "llm-5".into(),
            job: 5,
            state: "ready".into(),
            revision: 1,
            node: Some("node1".into()),
            addr: None,
            restarts: 0,
            message: None,
            reason: String::new(),
            log: "/tmp/llm.log".into(),
        };
        let service = ServiceInfo {
            name: "llm".into(),
            user: "alice".into(),
            revision: 2,
            history: vec![1],
            desired: 2,
            ready: 1,
            updated_ready: 1,
            replicas: vec![row],
            deleting: false,
            scale_log: vec![(i64::MAX, 2)],
            stats: stats.clone(),
            spec: spec(),
        };
        let mut node = model::Node::new("node1", 8, u64::MAX, 2);
        node.gpu_type = Some("h100".into());
        node.other = vec![("nic".into(), 2)];
        let view = EndpointView {
            version: 3,
            services: vec![ServiceEndpoints {
                name: "llm".into(),
                balance: "p2c".into(),
                hold_ms: 1,
                retries: 2,
                resume_streams: true,
                endpoints: vec![Endpoint { replica: "llm-5".into(), addr: "127.0.0.1:8000".into(), node: "node1".into() }],
                draining: vec!["llm-4".into()],
                max_concurrency: 8,
                max_wait_ms: 2_000,
                tenant_header: Some("x-tenant".into()),
                tenants: vec![control::service::Tenant { name: "alice".into(), weight: 2, keys: vec!["sk-a".into()] }],
                prefill_pace: 1,
            }],
            changed_ms: 1,
        };
        vec![
            ("Error", v(&ApiError { error: "no".into(), user_msg: None })),
            ("Error", v(&ApiError { error: "Unspecified error".into(), user_msg: Some("no time limit given".into()) })),
            (
                "SubmitRequest",
                v(&SubmitRequest {
                    batch: batch(),
                    cwd: "/home/alice".into(),
                    host: "login".into(),
                    env: vec![("A".into(), "b".into())],
                    umask: Some(0o077),
                }),
            ),
            (
                "SubmitRequest",
                v(&SubmitRequest {
                    batch: slurmcli::BatchSpec {
                        time: Some(None),
                        het: vec![slurmcli::BatchSpec { nodes: Some((2, 2)), ..Default::default() }],
                        ..Default::default()
                    },
                    cwd: "/".into(),
                    host: "h".into(),
                    env: vec![],
                    umask: None,
                }),
            ),
            ("SubmitResponse", v(&SubmitResponse { job_ids: vec![1, 2], test_only: None, user_msg: None })),
            ("SubmitResponse", v(&SubmitResponse { job_ids: vec![3], test_only: None, user_msg: Some("partition set to debug".into()) })),
            ("SubmitResponse", v(&SubmitResponse { job_ids: vec![], test_only: Some("would start".into()), user_msg: None })),
            ("JobInfo", v(&job_info())),
            (
                "NodeInfo",
                v(&NodeInfo {
                    name: "node1".into(),
                    state: "mixed".into(),
                    cpus: (8, 2),
                    memory_mb: (1024, 0),
                    gpus: (2, 1, Some("h100".into())),
                    reason: None,
                    addr: "127.0.0.1".into(),
                    partitions: vec!["batch".into()],
                    features: vec![],
                    reservation: Some("maint".into()),
                    reboot: Some("requested".into()),
                    registered: Some(1_800_000_000),
                    agent_started: Some(1_800_000_100),
                }),
            ),
            (
                "ResvInfo",
                v(&ResvInfo {
                    resv: model::Reservation {
                        name: "maint".into(),
                        start: 100,
                        end: 200,
                        nodes: vec!["node2".into()],
                        users: vec!["root".into()],
                        users_negated: false,
                        accounts: vec![],
                        accounts_negated: true,
                        partition: Some("batch".into()),
                        flags: model::ResvFlags { maint: true, daily: true, ..Default::default() },
                        tres: "cpu=4".into(),
                    },
                    start: 100,
                    end: 200,
                    active: true,
                    cpus: 4,
                    gpus: 0,
                }),
            ),
            ("ResvCreated", v(&ResvCreated { name: "root_1".into() })),
            ("Reconfigured", v(&Reconfigured { restart_needed: vec!["lease".into()] })),
            ("DebugLevel", v(&DebugLevel { filter: "info,server::jobs=debug".into() })),
            (
                "RebootRequest",
                v(&RebootRequest {
                    nodes: "node[1-2]".into(),
                    asap: true,
                    next_state: Some("resume".into()),
                    reason: Some("firmware".into()),
                }),
            ),
            ("CancelRebootRequest", v(&CancelRebootRequest { nodes: "ALL".into() })),
            (
                "ResvSpec",
                v(&slurmcli::resv::parse_reservation(
                    &[
                        "ReservationName=m",
                        "StartTime=now",
                        "Duration=5",
                        "Nodes=n[1-2]",
                        "Users=-bob",
                        "Accounts+=ml",
                        "Flags=MAINT,-DAILY",
                        "TRES=cpu=4",
                        "PartitionName=batch",
                        "NodeCnt=2",
                    ]
                    .map(String::from),
                    0,
                )
                .expect("valid")),
            ),
            (
                "ClusterStatus",
                v(&ClusterStatus {
                    controller: "https://10.0.0.1:6817".into(),
                    serving_since: 1_800_000_000,
                    starts: 7,
                    store: "etcd".into(),
                    etcd: Some(EtcdStatus {
                        prefix: "/tandem/".into(),
                        leaderships: 3,
                        commits: 1200,
                        commit_seconds_mean: 0.004,
                        members: vec![EtcdMember {
                            endpoint: "10.0.0.2:2379".into(),
                            error: Some("no answer in 1s".into()),
                            version: String::new(),
                            db_bytes: 0,
                            db_bytes_in_use: 0,
                            leader: false,
                            has_leader: false,
                            errors: vec![],
                        }],
                    }),
                    jobs_pending: 10,
                    jobs_running: 4,
                    nodes: 2,
                    nodes_up: 2,
                }),
            ),
            (
                "ConfigInfo",
                v(&ConfigInfo {
                    cluster_name: "tandem".into(),
                    kill_wait: 30,
                    lease: 30,
                    max_array: 1001,
                    min_job_age: 300,
                    scheduler: "sched/backfill".into(),
                    partitions: vec![
                        PartitionInfo {
                            name: "batch".into(),
                            default: true,
                            default_time: Some(3600),
                            max_time: None,
                            priority_tier: 1,
                            nodes: None,
                        },
                        PartitionInfo {
                            name: "gpu".into(),
                            default: false,
                            default_time: None,
                            max_time: Some(60),
                            priority_tier: 2,
                            nodes: Some(vec!["node1".into()]),
                        },
                    ],
                    qos: vec!["normal".into()],
                    max_script_size: Some(4194304),
                    mpi_default: Some("pmix".into()),
                    job_submit: Some("/etc/tandem/job_submit.lua".into()),
                    reboot_program: Some("/usr/sbin/reboot".into()),
                    resume_timeout: Some(600),
                    log_filter: Some("info".into()),
                }),
            ),
            (
                "StepRequest",
                v(&StepRequest {
                    nodes: Some(1),
                    ntasks: None,
                    ntasks_per_node: Some(2),
                    argv: vec!["hostname".into()],
                    spec: control::StepSpec {
                        het: vec![
                            control::HetStep { group: 0, ..Default::default() },
                            control::HetStep {
                                group: 1,
                                nodes: Some(2),
                                ntasks: Some(4),
                                ntasks_per_node: Some(2),
                                argv: vec!["other".into()],
                            },
                        ],
                        ..Default::default()
                    },
                }),
            ),
            (
                "StepRequest",
                v(&StepRequest {
                    nodes: None,
                    ntasks: Some(2),
                    ntasks_per_node: None,
                    argv: vec!["nvidia-smi".into()],
                    spec: control::StepSpec {
                        cpu_bind: Some("map_cpu:0,1".into()),
                        distribution: Some("block".into()),
                        res: control::StepRes {
                            cpus_per_task: Some(2),
                            exact: true,
                            whole: false,
                            overlap: false,
                            overcommit: true,
                            mem: Some(model::MemRequest::PerCpu(1 << 30)),
                            gpus: Some((model::GpuPer::Task(1), Some("h100".into()))),
                            time_limit: Some(600),
                        },
                        container: Some(slurmcli::Container { image: "nvcr.io#nvidia/pytorch:24.05-py3".into(), ..Default::default() }),
                        ..Default::default()
                    },
                }),
            ),
            (
                "ShareRow",
                v(&control::ShareRow {
                    account: "ml".into(),
                    user: "alice".into(),
                    raw_shares: 2,
                    norm_shares: 0.5,
                    raw_usage: 3600.0,
                    effective_usage: 0.25,
                    fairshare: 0.7,
                }),
            ),
            ("StepResponse", v(&StepResponse { step: 0, layout: vec![("node1".into(), 2)] })),
            ("AccountingInfo", v(&accounting())),
            (
                "CancelRequest",
                v(&CancelRequest {
                    ids: vec![1, 2],
                    signal: Some(10),
                    batch: true,
                    matching: Some(CancelMatch {
                        users: vec!["alice".into()],
                        states: vec!["PENDING".into()],
                        partition: Some("batch".into()),
                    }),
                }),
            ),
            ("CancelResponse", v(&CancelResponse { refused: vec![(2, "job 2 has already finished".into())] })),
            (
                "AcctRequest",
                v(&AcctRequest {
                    change: AcctChange {
                        verb: crate::AcctVerb::Modify,
                        entity: crate::AcctEntity::User,
                        filter: vec![Setting { key: "Names".into(), op: SetOp::Set, value: "alice".into() }],
                        set: vec![Setting { key: "QOS".into(), op: SetOp::Add, value: "serve".into() }],
                    },
                    dry_run: true,
                }),
            ),
            ("AcctResponse", v(&AcctResponse { text: " Modified user associations...\n".into() })),
            (
                "RegisterRequest",
                v(&RegisterRequest {
                    node,
                    addr: "127.0.0.1".into(),
                    running: Vec::new(),
                    exits: Vec::new(),
                    version: Some("0.1.0".into()),
                }),
            ),
            (
                "RegisterResponse",
                v(&RegisterResponse {
                    lease_s: 30,
                    heartbeat_ms: 5000,
                    prolog: Some("/etc/tandem/prolog".into()),
                    epilog: Some("/etc/tandem/epilog".into()),
                    prolog_epilog_timeout_s: 60,
                    health_check_program: Some("/usr/sbin/nhc".into()),
                    health_check_interval_s: 60,
                    health_check_node_state: Some("idle".into()),
                    gpu_health_check: true,
                }),
            ),
            (
                "Heartbeat",
                v(&Heartbeat {
                    node: "node1".into(),
                    ack: 3,
                    running: vec![control::TaskKey { job: 5, epoch: 1, step: 0, rank: 0 }],
                    exits: vec![exit],
                    wait_ms: 5000,
                    replicas: vec![report],
                    usage: vec![control::TaskUsage {
                        key: control::TaskKey { job: 5, epoch: 1, step: 0, rank: 0 },
                        rss_kb: 1024,
                        max_rss_kb: 2048,
                        cpu_ms: 1500,
                    }],
                    pulling: vec![control::Pulling {
                        key: control::TaskKey { job: 5, epoch: 1, step: 0, rank: 0 },
                        progress: "pulling nvcr.io/nvidia/pytorch:24.05-py3: layer 2/5 (1048576 bytes)".into(),
                    }],
                    drain: Some("Epilog error: exit status 1".into()),
                    health_failed: Some("NHC: check_fs_mount: /scratch not mounted".into()),
                    health_down: true,
                    health_passed: true,
                    frozen: vec![(5, 1)],
                    started: vec![(TaskKey { job: 5, epoch: 1, step: u32::MAX, rank: 0 }, 1_764_000_000)],
                }),
            ),
            (
                "Orders",
                v(&Orders {
                    orders: vec![
                        (1, control::Order::Launch(task)),
                        (2, control::Order::Signal { job: 5, epoch: 1, signal: 10, batch_only: true, step: Some(0) }),
                        (3, control::Order::Kill { job: 5, epoch: 1 }),
                        (4, control::Order::Reboot { program: "/usr/sbin/reboot".into() }),
                        (5, control::Order::Suspend { job: 5, epoch: 1 }),
                        (6, control::Order::Resume { job: 5, epoch: 1 }),
                        (
                            7,
                            control::Order::Output {
                                job: 5,
                                epoch: 1,
                                read: control::OutputRead {
                                    id: 3,
                                    key: "ab".repeat(32),
                                    files: vec!["/home/a/slurm-5.out".into()],
                                    uid: 1000,
                                    gid: 1000,
                                    follow: true,
                                    tail_lines: Some(10),
                                    limit_bytes: None,
                                },
                            },
                        ),
                    ],
                }),
            ),
            ("ApplyRequest", v(&ApplyRequest { spec: spec(), cwd: "/srv".into(), umask: Some(0o022) })),
            (
                "ApplyRequest",
                v(&ApplyRequest {
                    spec: control::ServiceSpec { name: "a".into(), command: vec!["x".into()], ..Default::default() },
                    cwd: "/".into(),
                    umask: None,
                }),
            ),
            ("ApplyResponse", v(&ApplyResponse { name: "llm".into(), revision: 1, changed: true, user_msg: None })),
            ("ServiceAction", v(&ServiceAction::Scale { replicas: 3 })),
            ("ServiceAction", v(&ServiceAction::Undo { revision: None })),
            ("ServiceAction", v(&ServiceAction::Undo { revision: Some(1) })),
            ("ServiceInfo", v(&service)),
            (
                "ProxySync",
                v(&ProxySync { proxy: "127.0.0.1:8080".into(), since: 2, wait_ms: 100, services: [("llm".to_string(), stats)].into() }),
            ),
            ("EndpointView", v(&view)),
            ("EndpointView", v(&EndpointView::default())),
        ]
    }

    /// Serializing without naming the type at each sample.
    mod erased {
        pub(super) trait Ser {
            fn value(&self) -> serde_json::Value;
        }
        impl<T: serde::Serialize> Ser for T {
            fn value(&self) -> serde_json::Value {
                serde_json::to_value(self).expect("serializable")
            }
        }
    }

    #[test]
    fn wire_types_match_their_schemas() {
        let d = doc();
        let mut errs = Vec::new();
        for (name, value) in samples() {
            let schema = d["components"]["schemas"].get(name).unwrap_or_else(|| panic!("no schema {name}"));
            check(&d, schema, &value, name, &mut errs);
        }
        assert!(errs.is_empty(), "{}", errs.join("\n"));
    }

    #[test]
    fn the_checker_catches_drift() {
        // The strict check itself: an undocumented field, a missing one, a wrong type, a bound.
        let d = doc();
        let schema = &d["components"]["schemas"]["StepResponse"];
        let errors = |v: Value| {
            let mut e = Vec::new();
            check(&d, schema, &v, "StepResponse", &mut e);
            e
        };
        assert!(errors(serde_json::json!({"step": 1, "layout": []})).is_empty());
        assert!(errors(serde_json::json!({"step": 1, "layout": [], "extra": 2}))[0].contains("undocumented"));
        assert!(errors(serde_json::json!({}))[0].contains("required"));
        assert!(errors(serde_json::json!({"step": "1", "layout": []}))[0].contains("type"));
        assert!(errors(serde_json::json!({"step": 4294967296u64, "layout": []}))[0].contains("above"));
        let mut e = Vec::new();
        check(&d, &d["components"]["schemas"]["ServiceAction"], &serde_json::json!({"action": "scale"}), "x", &mut e);
        assert!(!e.is_empty(), "scale needs replicas");
    }
}
