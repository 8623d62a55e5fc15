#!/usr/bin/env node
// Derive the spec that start-prism.sh serves from GitHub's published
// description (@octokit/openapi generated/api.github.com.json).
//
// usage: node prepare-spec.js SOURCE.json OUTPUT.json
//
// Two small, additive changes; nothing in GitHub's description is removed:
// error responses for the commit-status operations, so that a
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

// GitHub's examples for pull requests predate properties its own schema now
// requires of a team (`type`; `parent` in the full pull request). Prism
// checks its responses against the schema (--errors) and answered 500 to
// every valid GET/POST /repos/{o}/{r}/pulls with its own example. The teams
// in those examples get exactly the missing required properties (`type`:
// "organization", one of the schema's two values; `parent`: null), nothing
// else.
const team = spec.components.schemas.team;
const TEAM_DEFAULTS = { type: 'organization', parent: null };
for (const name of ['pull-request-simple-items', 'pull-request']) {
  const ex = spec.components.examples[name];
  if (!ex || !team) {
    console.error(`prepare-spec: warning: example ${name} or schema team not in the description`);
    continue;
  }
  for (const pull of Array.isArray(ex.value) ? ex.value : [ex.value]) {
    for (const t of pull.requested_teams || []) {
      for (const prop of team.required || []) {
        if (!(prop in t) && prop in TEAM_DEFAULTS) {
          t[prop] = TEAM_DEFAULTS[prop];
          added.push(`example ${name} requested_teams[].${prop}`);
        }
      }
    }
  }
}

spec.info = spec.info || {};
spec.info['x-lockstep-derived'] =
  `${path.basename(src)} + 401/403/404 on commit-status operations, required team properties in the pull-request examples (tests/peers/github/prepare-spec.js)`;

const tmp = `${out}.${process.pid}.tmp`;
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(tmp, JSON.stringify(spec));
fs.renameSync(tmp, out); // atomic: parallel starts never read a half-written file
console.error(`prepare-spec: ${added.length} additions -> ${out}`);
