#!/usr/bin/env node
// An apportion scheduler client in Node.js: list the policies, solve a snapshot, and read the
// field violations of a rejected request (google.rpc.BadRequest).
//
//   npm install                      (in this folder: @grpc/grpc-js, @grpc/proto-loader)
//   apportion serve --port 50051 &   (in another shell)
//   node client.js 127.0.0.1:50051 ../../four_jobs.json ../../invalid.json
//
// Arguments (all optional): ADDRESS (default 127.0.0.1:50051), a snapshot file (the canonical
// JSON of apportion.v1.SolveRequest, default examples/four_jobs.json) and a snapshot the server
// must reject (default examples/invalid.json). `--json` prints one JSON object instead of text.
// The .proto files are read at run time from the repository's proto/ folder (or
// $APPORTION_PROTO_ROOT): apportion/v1/*.proto, and google/rpc/*.proto vendored beside them.
'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs'); // comes with @grpc/proto-loader

const EXAMPLES = path.resolve(__dirname, '..', '..');
const PROTO_ROOT = process.env.APPORTION_PROTO_ROOT || path.resolve(EXAMPLES, '..', 'proto');
const CALL_TIMEOUT_S = 60;

// The service, with messages as plain objects: lowerCamelCase field names (as in the
// canonical JSON of a snapshot file), enums as their names, oneofs naming their set field.
const definition = protoLoader.loadSync('apportion/v1/allocation_service.proto', {
  includeDirs: [PROTO_ROOT],
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
});
const { AllocationService } = grpc.loadPackageDefinition(definition).apportion.v1;

// google.rpc.Status and its details, to decode the `grpc-status-details-bin` trailer (field
// names as in the .proto files: type_url, field_violations).
const rpcTypes = new protobuf.Root();
rpcTypes.resolvePath = (origin, target) => path.join(PROTO_ROOT, target);
rpcTypes.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], { keepCase: true });
const Status = rpcTypes.lookupType('google.rpc.Status');

/** A unary call as a promise, with a deadline. */
function call(client, method, request, timeoutS = CALL_TIMEOUT_S) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + timeoutS * 1000);
    client[method](request, { deadline }, (error, reply) => (error ? reject(error) : resolve(reply)));
  });
}

/** The google.rpc details of a failed call: [{type: 'google.rpc.BadRequest', detail: {...}}]. */
function statusDetails(error) {
  const [raw] = error.metadata ? error.metadata.get('grpc-status-details-bin') : [];
  if (!raw) return [];
  const status = Status.decode(raw);
  return status.details.map((any) => {
    const name = any.type_url.slice(any.type_url.lastIndexOf('/') + 1);
    const type = rpcTypes.lookupType(name);
    return { type: name, detail: type.toObject(type.decode(any.value), { defaults: true }) };
  });
}

function readRequest(file) {
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

/** The JSON (and protobufjs) name of a proto field name: cost_throughput -> costThroughput. */
function jsonName(field) {
  return field.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
}

async function main(argv) {
  const asJson = argv.includes('--json');
  const [
    address = '127.0.0.1:50051',
    snapshotFile = path.join(EXAMPLES, 'four_jobs.json'),
    invalidFile = path.join(EXAMPLES, 'invalid.json'),
  ] = argv.filter((arg) => arg !== '--json');
  const client = new AllocationService(address, grpc.credentials.createInsecure());
  const out = {};

  // 1. What the server offers. `parametersField` names the Policy oneof field that carries a
  // policy's parameters (e.g. cost_normalized_throughput -> cost_throughput).
  const { policies } = await call(client, 'ListPolicies', {});
  out.policies = policies.map((p) => ({
    name: p.name,
    parametersField: p.parametersField,
    planKind: p.capabilities.planKind,
    requiredInputs: p.requiredInputs,
  }));

  // 2. Solve a snapshot file. Parameters go in request.policy[jsonName(parametersField)].
  const request = readRequest(snapshotFile);
  const spec = policies.find((p) => p.name === request.policy.name);
  if (spec && spec.parametersField && !(jsonName(spec.parametersField) in request.policy)) {
    request.policy[jsonName(spec.parametersField)] = {}; // the policy's defaults, explicitly
  }
  const response = await call(client, 'Solve', request);
  out.solve = {
    termination: response.stats.termination,
    objective: response.stats.objective,
    jobs: Object.fromEntries(response.plan.jobs.map((job) => [job.jobId, job.timeShare])),
  };

  // 3. A rejected request: INVALID_ARGUMENT with one field violation per problem.
  try {
    await call(client, 'Solve', readRequest(invalidFile));
    throw new Error(`${invalidFile} was accepted`);
  } catch (error) {
    if (error.code !== grpc.status.INVALID_ARGUMENT) throw error;
    const badRequest = statusDetails(error).find((d) => d.type === 'google.rpc.BadRequest');
    out.badRequest = badRequest ? badRequest.detail.field_violations : [];
  }
  client.close();

  if (asJson) {
    console.log(JSON.stringify(out));
    return;
  }
  console.log(`${out.policies.length} policies:`);
  for (const p of out.policies) {
    console.log(`  ${p.name.padEnd(32)} ${p.planKind.padEnd(26)} ${p.parametersField || '-'}`);
  }
  console.log(`\nsolve: ${out.solve.termination}, objective ${out.solve.objective}`);
  for (const [id, share] of Object.entries(out.solve.jobs)) {
    const cells = Object.entries(share).map(([type, value]) => `${type} ${value.toFixed(3)}`);
    console.log(`  ${id.padEnd(16)} ${cells.join('  ')}`);
  }
  console.log(`\nrejected (${out.badRequest.length} field violations):`);
  for (const v of out.badRequest) console.log(`  ${v.field}: ${v.description}`);
}

main(process.argv.slice(2)).catch((error) => {
  const details = statusDetails(error);
  console.error(`error: ${error.message}${details.length ? ` ${JSON.stringify(details)}` : ''}`);
  process.exit(1);
});
