// gpuspawner's spawn form: live availability (share/templates/gpuspawner-live.html, docs/spawn-page.md).
// Served by the hub at /hub/gpuspawner/static/ (gpuspawner/hub/form_assets.py); its data, per GPU
// profile, is the JSON of the page's #gs-live-profiles element.
(function () {
  "use strict";
  var data = document.getElementById("gs-live-profiles");
  if (!data) { return; }
  var PROFILES = JSON.parse(data.textContent);
  var DEFAULT_REFRESH_S = 10;
  var MAX_BACKOFF_S = 120;
  var root = document.getElementById("kubespawner-profiles-list");
  if (!root || !window.fetch) { return; }
  var form = root.closest("form");
  var jhdata = window.jhdata || {};

  // --- settings ------------------------------------------------------------
  function refreshSeconds() {
    // Not a query parameter: JupyterHub starts a server when /hub/spawn gets
    // any query argument (jupyterhub/handlers/pages.py, SpawnHandler.get);
    // a fragment never reaches the server.
    var m = window.location.hash.match(/(?:^#|&)gs-refresh=([0-9.]+)/);
    var s = parseFloat(m ? m[1] : root.getAttribute("data-gs-refresh"));
    return (isFinite(s) && s >= 1 && s <= 3600) ? s : DEFAULT_REFRESH_S;
  }
  var period = refreshSeconds();

  function apiUrl() {
    // jhdata.base_url is the hub's prefix ("/hub/"), set by JupyterHub's page.html
    var base = jhdata.base_url || "/hub/";
    return base.replace(/\/?$/, "/") + "api/gpus";
  }

  function xsrfToken() {
    // A fetch() is a "cors"-mode request, so JupyterHub checks its XSRF token
    // even for GET (jupyterhub/_xsrf_utils.py, _needs_check_xsrf); the page
    // carries it in jhdata.xsrf_token, the _xsrf cookie holds the same value.
    if (jhdata.xsrf_token) { return jhdata.xsrf_token; }
    var m = document.cookie.match(/(?:^|;\s*)_xsrf=([^;]*)/);
    return m ? decodeURIComponent(m[1]) : "";
  }

  // --- the rule of gpuspawner.profiles._offer_checked, on the API's pool ---
  function has(obj, key) { return Object.prototype.hasOwnProperty.call(obj, key); }
  function isCount(v) { return typeof v === "number" && isFinite(v) && v >= 0; }

  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  function limits(pool, cap) {
    if (!pool || !isCount(pool.free) || !isCount(pool.total) || !isCount(pool.nodes) ||
        !isCount(pool.max_free_per_node)) {
      return null;
    }
    var su = pool.scale_up;
    if (su && !(isCount(su.max_nodes) && isCount(su.gpus_per_node) && isCount(su.minutes))) { su = null; }
    var now = pool.max_free_per_node;  // a pod's GPUs all come from one node
    var later = (su && pool.nodes < su.max_nodes) ? su.gpus_per_node : 0;  // a new node brings this many
    var limit = Math.max(now, later);
    if (cap > 0) { limit = Math.min(limit, cap); now = Math.min(now, cap); }
    var reason = null;
    if (limit <= 0) {
      if (pool.total === 0) {
        // a taint no server tolerates on every node: the hub says which, and how to allow it
        reason = (typeof pool.refused_by_taint === "string" && pool.refused_by_taint) ?
          pool.refused_by_taint : "no GPUs are allocatable in this pool now";
      } else {
        reason = pool.total > 1 ? "all " + pool.total + " GPUs are in use" : "its only GPU is in use";
        if (su) { reason += " and the pool is at its maximum of " + su.max_nodes + " nodes"; }
      }
    }
    return {
      pool: pool, limit: Math.max(limit, 0), now: Math.max(now, 0), reason: reason,
      scaleMinutes: (su && limit > now) ? su.minutes : null
    };
  }

  // --- the page ---------------------------------------------------------------
  function poolRadios(slug) {
    return Array.prototype.filter.call(
      root.querySelectorAll("input[type=radio][data-gs-max]"),
      function (r) { return r.getAttribute("data-gs-profile") === slug; });
  }
  function countSelect(slug) { return document.getElementById("profile-option-" + slug + "--gpus"); }
  function card(radio) { return radio.closest(".gs-pool"); }
  function poolName(radio) {
    var label = root.querySelector('label[for="' + radio.id + '"]');
    return (label ? label.textContent : radio.value).trim();
  }
  function setText(el, text) { if (el && el.textContent !== text) { el.textContent = text; } }
  // the page's own messages: no room taken while they are empty (they stay in the
  // accessibility tree, so the live region is announced when text arrives)
  function say(el, text) {
    setText(el, text);
    el.style.margin = text ? "0.5rem 0" : "0";
  }

  function describedBy(el, id, on) {
    if (!id) { return; }
    var ids = (el.getAttribute("aria-describedby") || "").split(/\s+/).filter(Boolean);
    var has = ids.indexOf(id) >= 0;
    if (on && !has) { ids.push(id); }
    if (!on && has) { ids.splice(ids.indexOf(id), 1); }
    if (ids.length) { el.setAttribute("aria-describedby", ids.join(" ")); } else { el.removeAttribute("aria-describedby"); }
  }

  // a paragraph of the card, created on demand after `after` (template order: details, note, reason)
  function cardLine(box, cls, id, after) {
    var p = box.querySelector("p." + cls);
    if (!p) {
      p = document.createElement("p");
      p.className = cls;
      p.id = id;
      var anchor = after.filter(Boolean).pop();
      if (anchor && anchor.nextSibling) { box.insertBefore(p, anchor.nextSibling); } else { box.appendChild(p); }
    }
    if (!p.id) { p.id = id; }  // one rendered by the hub: named, so the radio can point at it
    return p;
  }

  function showPool(radio, info) {
    var box = card(radio);
    radio.setAttribute("data-gs-max", String(info.limit));
    radio.setAttribute("data-gs-now", String(info.now));
    // the checked radio stays enabled (and is flagged instead): a disabled
    // control is neither submitted nor focusable, so the user would lose sight
    // of what they chose
    radio.disabled = info.limit <= 0 && !radio.checked;
    if (!box) { return; }
    box.classList.toggle("gs-disabled", info.limit <= 0);
    var pool = info.pool;
    var freeLine = box.querySelector("[data-gs-free]");
    var unit = (freeLine && freeLine.getAttribute("data-gs-unit")) || "GPU";
    var waiting = pool && pool.nodes === 0 && info.scaleMinutes !== null;  // spawn/scale_up.wait_words
    var minutes = waiting ? Math.max(1, Math.round(info.scaleMinutes)) : 0;
    setText(freeLine, !pool ? "none" : waiting ?
      "no machine running now; one starts in about " + plural(minutes, "minute") :
      pool.free + " of " + plural(pool.total, unit) + " on " + plural(pool.nodes, "node"));
    setText(box.querySelector("[data-gs-per-server]"), info.limit > 0 ? "up to " + plural(info.limit, unit) : "none now");
    var details = document.getElementById(radio.id + "-details");
    var note = box.querySelector("p.gs-note");
    if (info.scaleMinutes !== null) {
      note = cardLine(box, "gs-note", radio.id + "-note", [details]);
      setText(note, (info.now > 0 ? "More than " + plural(info.now, "GPU") + ": available" : "Available") +
        " after scale-up (~" + info.scaleMinutes + " min).");
      describedBy(radio, note.id, true);
    } else if (note) {
      describedBy(radio, note.id, false);
      note.remove();
      note = null;
    }
    var reason = box.querySelector("p.gs-reason");
    if (info.reason) {
      reason = cardLine(box, "gs-reason", radio.id + "-reason", [details, note]);
      setText(reason, "Unavailable: " + info.reason + ".");
      describedBy(radio, reason.id, true);
    } else if (reason) {
      describedBy(radio, reason.id, false);
      reason.remove();
    }
    var line = box.querySelector("p.gs-queue");
    if (info.queueText) {
      line = cardLine(box, "gs-queue", radio.id + "-queue", [details, note, reason]);
      setText(line, info.queueText);
      describedBy(radio, line.id, true);
    } else if (line) {
      describedBy(radio, line.id, false);
      line.remove();
    }
  }

  // a full pool with a Kueue queue (its "queue" in the API) can still be chosen: the user
  // waits in line for as many GPUs as the hub offered when it drew the page
  function ordinal(n) {
    var s = (n % 100 >= 10 && n % 100 <= 20) ? "th" : ({ 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th");
    return n + s;
  }
  function queued(radio, info) {
    if (!info || !info.pool || !info.pool.queue || typeof info.pool.queue.name !== "string") { return info; }
    var max = parseInt(radio.getAttribute("data-gs-queue-max") || "0", 10);
    if (info.limit > 0 || !(max > 0)) { return info; }
    var pending = info.pool.queue.pending;
    info.limit = max;
    info.reason = null;
    info.queueText = (isCount(pending)
      ? "Full — " + (pending === 0 ? "nobody" : pending) + " waiting; you would be " + ordinal(pending + 1)
      : "Full — you can queue for a GPU here") + " (Kueue queue " + info.pool.queue.name + ").";
    return info;
  }

  // "Image ready on 3 of 5 nodes (label)." from the API's {"cached_nodes", "nodes"} of one image
  // (spawn/cards.image_ready_words); "" for a pool with no node now (the line is then not shown);
  // null when the answer does not say (the line is left as it is)
  function readyWords(counts, label) {
    if (!counts || !isCount(counts.cached_nodes) || !isCount(counts.nodes)) { return null; }
    if (counts.nodes <= 0) { return ""; }
    return "Image ready on " + Math.min(counts.cached_nodes, counts.nodes) + " of " + plural(counts.nodes, "node") +
      (label ? " (" + label + ")" : "") + ".";
  }

  // every card's image lines, whether or not its GPU counts follow the refresh: the API counts
  // the same nodes for them as the page did
  function showImages(byId) {
    Array.prototype.forEach.call(root.querySelectorAll("p.gs-warm[data-gs-image]"), function (line) {
      var box = line.closest(".gs-pool");
      var radio = box && box.querySelector("input[type=radio][data-gs-max]");
      var pool = radio && has(byId, radio.value) ? byId[radio.value] : null;
      var images = pool && pool.images;
      var ref = line.getAttribute("data-gs-image");
      if (!images || typeof images !== "object" || !has(images, ref)) { return; }
      var text = readyWords(images[ref], line.getAttribute("data-gs-image-label"));
      if (text !== null) { setText(line, text); }
    });
  }

  function gone() {
    return { pool: null, limit: 0, now: 0, reason: "this pool is no longer in the cluster", scaleMinutes: null };
  }

  function showCounts(slug) {
    var select = countSelect(slug);
    if (!select) { return; }
    var radios = poolRadios(slug);
    var chosen = radios.filter(function (r) { return r.checked; })[0];
    var profileMax = radios.reduce(function (m, r) {
      return Math.max(m, parseInt(r.getAttribute("data-gs-max"), 10) || 0);
    }, 0);
    // the page offered 1..(max at render time); more may be free now
    for (var n = select.options.length + 1; n <= profileMax; n++) {
      var opt = document.createElement("option");
      opt.value = String(n);
      opt.textContent = plural(n, "GPU");
      select.appendChild(opt);
    }
    var max = chosen ? (parseInt(chosen.getAttribute("data-gs-max"), 10) || 0) : profileMax;
    Array.prototype.forEach.call(select.options, function (o) {
      o.disabled = (parseInt(o.value, 10) || 0) > max && !o.selected;
    });
  }

  // --- what the user chose, and whether it can still be had ------------------
  var notice = document.createElement("p");
  notice.id = "gs-live-warning";
  notice.className = "gs-warning";
  notice.setAttribute("role", "status");
  notice.setAttribute("aria-live", "polite");
  var status = document.createElement("p");
  status.id = "gs-live-status";
  status.className = "gs-note";
  say(notice, "");
  say(status, "");
  var submit = form && form.querySelector("button[type=submit], input[type=submit]");
  var spot = submit ? (submit.parentElement === form ? submit : submit.parentElement) : null;
  if (spot) {
    form.insertBefore(status, spot);
    form.insertBefore(notice, spot);
  } else {
    root.appendChild(status);
    root.appendChild(notice);
  }

  var flagged = [];
  function flag(el) {
    el.setAttribute("aria-invalid", "true");
    describedBy(el, notice.id, true);
    flagged.push(el);
  }

  // the first problem with the chosen profile's pool and count, or null
  function problem() {
    var profile = root.querySelector("input[name=profile]:checked");
    var slug = profile ? profile.value : null;
    if (!slug || !has(PROFILES, slug)) { return null; }
    var chosen = poolRadios(slug).filter(function (r) { return r.checked; })[0];
    if (!chosen) { return null; }
    var max = parseInt(chosen.getAttribute("data-gs-max"), 10) || 0;
    var reason = card(chosen) && card(chosen).querySelector("p.gs-reason");
    if (max <= 0) {
      return {
        field: chosen,
        text: "The pool you chose, " + poolName(chosen) + ", cannot give a GPU now" +
          (reason ? " (" + reason.textContent.replace(/^Unavailable:\s*/, "").replace(/\.$/, "") + ")" : "") +
          ". Choose another pool before you start."
      };
    }
    var select = countSelect(slug);
    var wanted = select ? parseInt(select.value, 10) || 0 : 0;
    if (wanted > max) {
      return {
        field: select,
        text: poolName(chosen) + " can give at most " + plural(max, "GPU") + " to one server now; " +
          "you chose " + wanted + ". Choose fewer GPUs or another pool before you start."
      };
    }
    return null;
  }

  function check() {
    flagged.forEach(function (el) {
      el.removeAttribute("aria-invalid");
      describedBy(el, notice.id, false);
    });
    flagged = [];
    var p = problem();
    if (p) { flag(p.field); }
    say(notice, p ? p.text : "");
    return p;
  }

  function apply(data) {
    var byId = {};
    data.pools.forEach(function (pool) { if (pool && typeof pool.id === "string") { byId[pool.id] = pool; } });
    var reload = false;
    Object.keys(PROFILES).forEach(function (slug) {
      var cfg = PROFILES[slug];
      if (cfg.problem && data.pools.length) { reload = true; }
      poolRadios(slug).forEach(function (radio) {
        if (cfg.live.indexOf(radio.value) < 0) { return; }
        var info = has(byId, radio.value) ? queued(radio, limits(byId[radio.value], cfg.cap)) : gone();
        if (info) { showPool(radio, info); }
      });
      showCounts(slug);
    });
    showImages(byId);
    say(status, reload ? "GPU capacity is known again: reload this page to see every pool." : "");
    root.setAttribute("data-gs-refreshed", new Date().toISOString());
    check();
  }

  // --- polling ------------------------------------------------------------------
  var timer = null;
  var failures = 0;
  var inFlight = false;
  var stopped = false;

  function schedule(seconds) {
    clearTimeout(timer);
    if (!stopped) { timer = setTimeout(refresh, seconds * 1000); }
  }

  function refresh() {
    if (stopped || inFlight) { return; }
    if (document.hidden) { return; }  // resumed by visibilitychange
    inFlight = true;
    fetch(apiUrl(), {
      credentials: "same-origin",
      cache: "no-store",
      headers: { "Accept": "application/json", "X-XSRFToken": xsrfToken() }
    }).then(function (r) {
      if (r.status === 401 || r.status === 403) {
        // the session ended or the token is stale: polling cannot recover
        stopped = true;
        throw new Error("the hub answered " + r.status + "; reload the page (sign in again if asked)");
      }
      if (!r.ok) { throw new Error("the hub answered " + r.status); }
      return r.json();
    }).then(function (data) {
      if (!data || !Array.isArray(data.pools)) { throw new Error("the hub sent no pool list"); }
      if (data.synced !== true) { throw new Error("the hub is still reading the cluster"); }
      if (data.healthy === false) {
        // the hub's figures are stale (a lost watch, missing rights): its own words, bounded
        var why = typeof data.error === "string" && data.error ? data.error.slice(0, 300) : "GPU capacity is unknown";
        throw new Error(why);
      }
      failures = 0;
      apply(data);
    }).catch(function (e) {
      failures += 1;
      say(status, "GPU counts could not be refreshed (" + e.message + "); the numbers shown may be out of date.");
    }).then(function () {
      inFlight = false;
      // back off while the hub is unhappy, so a struggling hub is not hammered by open pages
      schedule(Math.min(period * Math.pow(2, failures), Math.max(period, MAX_BACKOFF_S)));
    });
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) { refresh(); }
  });
  window.addEventListener("pageshow", function (ev) {
    // back to this page from the browser's back/forward cache: polling stopped at submit
    if (ev.persisted) { stopped = false; refresh(); }
  });
  window.addEventListener("hashchange", function () {
    period = refreshSeconds();
    if (!inFlight) { schedule(period); }
  });
  root.addEventListener("change", function () {
    Object.keys(PROFILES).forEach(function (slug) {
      poolRadios(slug).forEach(function (radio) {
        var max = parseInt(radio.getAttribute("data-gs-max"), 10) || 0;
        if (PROFILES[slug].live.indexOf(radio.value) >= 0) { radio.disabled = max <= 0 && !radio.checked; }
      });
      showCounts(slug);
    });
    check();
  });
  if (form) {
    // capture phase at the document: runs before JupyterHub's own submit
    // handler on the form (spawn.html), which hides the Start button
    document.addEventListener("submit", function (ev) {
      if (ev.target !== form) { return; }
      var p = check();
      if (!p) { stopped = true; clearTimeout(timer); return; }
      ev.preventDefault();
      ev.stopPropagation();
      p.field.focus();
      refresh();  // the numbers may have moved since the last poll
    }, true);
  }
  check();
  schedule(period);
})();
