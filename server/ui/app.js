// The status page: it asks status.json every two seconds (the second time
// after one, so that rates show at once) and writes the answer into the
// page with textContent only (nothing is parsed as HTML).
"use strict";

const refreshMs = 2000;
const firstRefreshMs = 1000;
let previous = null;
let rated = false; // a second answer was asked for soon after the first
const count = new Intl.NumberFormat("en-US");
const decimal = new Intl.NumberFormat("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });

function text(id, value) {
  document.getElementById(id).textContent = String(value);
}

// num formats a count with thousands separators; anything else as is.
function num(value) {
  return typeof value === "number" ? count.format(value) : String(value);
}

function cell(row, value, bad, title) {
  const td = row.insertCell();
  td.textContent = String(value);
  if (bad) td.className = "bad";
  if (title) td.title = title;
}

// reason is a short form of why a member could not be asked; the whole
// error goes in the cell's tooltip.
function reason(err) {
  const known = [
    ["connection refused", "connection refused"],
    ["deadline exceeded", "timed out"],
    ["timeout", "timed out"],
    ["no route to host", "no route to host"],
    ["no such host", "unknown host"],
    ["connection reset", "connection reset"],
    ["certificate", "TLS certificate error"],
    ["tls", "TLS error"],
    ["EOF", "connection closed"],
  ];
  for (const [needle, short] of known) {
    if (err.includes(needle)) return short;
  }
  return err.length > 40 ? err.slice(0, 39) + "…" : err;
}

function rate(now, before, key) {
  if (!before) return "…";
  const seconds = (now.time_unix_ms - before.time_unix_ms) / 1000;
  if (seconds <= 0) return "…";
  return decimal.format((key(now) - key(before)) / seconds);
}

function render(s) {
  text("node", s.node_id);
  text("leader", s.leader_id || "none");
  text("term", s.term);
  text("updated", "updated " + new Date(s.time_unix_ms).toLocaleTimeString());
  const body = document.querySelector("#members tbody");
  body.replaceChildren();
  for (const m of s.members) {
    const row = body.insertRow();
    row.dataset.id = m.id;
    if (m.leader) row.className = "leader";
    cell(row, m.id);
    cell(row, m.http_addr);
    cell(row, m.error ? "unreachable" : m.state, !!m.error);
    cell(row, m.voter ? "yes" : "no");
    cell(row, m.error ? "" : num(m.term));
    cell(row, m.error ? "" : num(m.commit_index));
    cell(row, m.error ? "" : num(m.applied_index));
    cell(row, m.error ? "" : (m.ready ? "yes" : "no"), !m.error && !m.ready);
    cell(row, m.error ? "" : m.clock_offset_ms + " ms", m.clock_skewed);
    cell(row, m.error ? reason(m.error) : (m.clock_skewed ? "clock skewed: it does not lead" : ""), !!m.error, m.error);
  }
  for (const k of ["leases", "leases_held", "queues"]) text(k, num(s.counts[k]));
  for (const k of ["max_leases", "max_queues"]) text(k, num(s.limits[k]));
  for (const k of ["pending", "claimed", "completed", "failed"]) text("jobs_" + k, num(s.counts.jobs[k]));
  text("request_rate", rate(s, previous, (x) => x.requests_total));
  text("proposal_rate", rate(s, previous, (x) => (x.proposals && x.proposals.applied) || 0));
  text("proposals", Object.entries(s.proposals || {}).map(([k, v]) => k + " " + num(v)).join(", ") || "none");
  previous = s;
}

async function refresh() {
  const banner = document.getElementById("error");
  try {
    const r = await fetch("status.json", { cache: "no-store" });
    if (!r.ok) throw new Error("status.json answered HTTP " + r.status);
    render(await r.json());
    banner.hidden = true;
  } catch (e) {
    banner.textContent = "Cannot refresh: " + e.message;
    banner.hidden = false;
  } finally {
    setTimeout(refresh, previous && !rated ? firstRefreshMs : refreshMs);
    if (previous) rated = true;
  }
}

refresh();
