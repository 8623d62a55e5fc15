// Preloaded into Prism by start-prism.sh (`node --require ./accept-shim.js`).
//
// GitHub documents every JSON response under `application/json`, but GitHub
// clients send `Accept: application/vnd.github+json` (or the older
// `application/vnd.github.v3+json`), which real GitHub answers with
// `Content-Type: application/json; charset=utf-8`. Prism matches Accept
// literally and would answer 406. This shim appends `application/json` to
// such Accept headers before Prism sees the request, so Prism serves the
// documented application/json response. Other media types (e.g.
// application/vnd.github.diff) are left alone.
//
// (Adding vnd.github aliases to every response in the spec instead costs
// about +7 s startup and +200 MB RSS, measured on api.github.com.json 23.0.2.)
'use strict';
const http = require('http');

const GENERIC = /^application\/vnd\.github(\.v\d+)?\+json$/i;

function rewrite(accept) {
  const ranges = accept.split(',').map(r => r.split(';')[0].trim().toLowerCase());
  if (ranges.some(r => GENERIC.test(r)) && !ranges.includes('application/json')) {
    return `${accept}, application/json`;
  }
  return accept;
}

const emit = http.Server.prototype.emit;
http.Server.prototype.emit = function (event, req, ...rest) {
  if (event === 'request' && req && req.headers && typeof req.headers.accept === 'string') {
    req.headers.accept = rewrite(req.headers.accept);
  }
  return emit.call(this, event, req, ...rest);
};
