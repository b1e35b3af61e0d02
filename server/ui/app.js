// The status page: it asks status.json every two seconds and writes the
// answer into the page with textContent only (nothing is parsed as HTML).
"use strict";

const refreshMs = 2000;
let previous = null;

function text(id, value) {
  document.getElementById(id).textContent = String(value);
}

function cell(row, value, bad) {
  const td = row.insertCell();
  td.textContent = String(value);
  if (bad) td.className = "bad";
}

function rate(now, before, key) {
  if (!before) return "…";
  const seconds = (now.time_unix_ms - before.time_unix_ms) / 1000;
  if (seconds <= 0) return "…";
  return ((key(now) - key(before)) / seconds).toFixed(1);
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
    cell(row, m.error ? "" : m.term);
    cell(row, m.error ? "" : m.commit_index);
    cell(row, m.error ? "" : m.applied_index);
    cell(row, m.error ? "" : (m.ready ? "yes" : "no"), !m.error && !m.ready);
    cell(row, m.error ? "" : m.clock_offset_ms + " ms", m.clock_skewed);
    cell(row, m.error || (m.clock_skewed ? "clock skewed: it does not lead" : ""), !!m.error);
  }
  for (const k of ["leases", "leases_held", "queues"]) text(k, s.counts[k]);
  for (const k of ["max_leases", "max_queues"]) text(k, s.limits[k]);
  for (const k of ["pending", "claimed", "completed", "failed"]) text("jobs_" + k, s.counts.jobs[k]);
  text("request_rate", rate(s, previous, (x) => x.requests_total));
  text("proposal_rate", rate(s, previous, (x) => (x.proposals && x.proposals.applied) || 0));
  text("proposals", Object.entries(s.proposals || {}).map(([k, v]) => k + " " + v).join(", ") || "none");
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
    setTimeout(refresh, refreshMs);
  }
}

refresh();
