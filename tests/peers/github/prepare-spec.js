#!/usr/bin/env node
// Derive the spec that start-prism.sh serves from GitHub's published
// description (@octokit/openapi generated/api.github.com.json).
//
// usage: node prepare-spec.js SOURCE.json OUTPUT.json
//
// One small, additive change; nothing in GitHub's description is removed
// or altered: error responses for the commit-status operations, so that a
// test can force them with `Prefer: code=401|403|404`. GitHub's description
// only declares 201 for POST /repos/{owner}/{repo}/statuses/{sha} (200/301
// and 200/404 for the two GETs), and Prism refuses `Prefer: code=` for
// undeclared codes. The shapes are the description's own
// components/responses (basic-error). 422 is deliberately NOT added: with
// no 422/400 declared, Prism answers schema-invalid bodies with a 422
// problem+json that lists the violations, which is more useful.
//
// (The Accept: application/vnd.github+json problem is handled by
// accept-shim.js, not here.)
'use strict';
const fs = require('fs');
const path = require('path');

const [src, out] = process.argv.slice(2);
if (!src || !out) {
  console.error('usage: node prepare-spec.js SOURCE.json OUTPUT.json');
  process.exit(2);
}

const spec = JSON.parse(fs.readFileSync(src, 'utf8'));
const ERRORS = { 401: 'requires_authentication', 403: 'forbidden', 404: 'not_found' };
const STATUS_OPS = [
  ['/repos/{owner}/{repo}/statuses/{sha}', 'post'],
  ['/repos/{owner}/{repo}/commits/{ref}/statuses', 'get'],
  ['/repos/{owner}/{repo}/commits/{ref}/status', 'get'],
];
const added = [];
for (const [p, m] of STATUS_OPS) {
  const op = spec.paths[p] && spec.paths[p][m];
  if (!op) {
    console.error(`prepare-spec: warning: ${m.toUpperCase()} ${p} not in the description`);
    continue;
  }
  for (const [code, name] of Object.entries(ERRORS)) {
    if (!op.responses[code] && spec.components.responses[name]) {
      op.responses[code] = { $ref: `#/components/responses/${name}` };
      added.push(`${m.toUpperCase()} ${p} ${code}`);
    }
  }
}

spec.info = spec.info || {};
spec.info['x-lockstep-derived'] =
  `${path.basename(src)} + 401/403/404 on commit-status operations (tests/peers/github/prepare-spec.js)`;

const tmp = `${out}.${process.pid}.tmp`;
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(tmp, JSON.stringify(spec));
fs.renameSync(tmp, out); // atomic: parallel starts never read a half-written file
console.error(`prepare-spec: ${added.length} error responses added -> ${out}`);
