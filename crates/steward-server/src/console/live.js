// The Steward console's one script (see console/live.rs). A page whose <main> carries
// data-live is fetched again when the environment's event stream announces a change, and its
// <main> is replaced by the new one: no reload, and nothing the operator is typing is lost (while
// a field differs from what the page showed, updates wait). Without this script every page
// still works; it only saves the reload.
(function () {
  "use strict";
  // Changes that arrive together are shown together.
  var REFRESH_DELAY_MS = 300;
  // After the server refused the stream (too many open pages), try again this much later.
  var RETRY_MS = 10000;
  var status = document.getElementById("live");
  var timer = null;
  var waiting = false;
  var inFlight = false;
  var again = false;

  function current() {
    return document.querySelector("main[data-live]");
  }
  if (!current() || typeof EventSource === "undefined" || typeof fetch === "undefined") {
    return;
  }

  function say(text) {
    if (status) {
      status.textContent = text;
    }
  }

  // Whether the operator changed a field of this page (a note, a filter, a choice).
  function edited(main) {
    var fields = main.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden" || f.type === "submit") {
        continue;
      }
      if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) {
            return true;
          }
        }
      } else if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) {
          return true;
        }
      } else if (f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function schedule() {
    if (timer === null) {
      timer = window.setTimeout(refresh, REFRESH_DELAY_MS);
    }
  }

  function refresh() {
    timer = null;
    var main = current();
    if (!main) {
      return;
    }
    if (edited(main)) {
      waiting = true;
      say("updates waiting");
      return;
    }
    if (inFlight) {
      again = true;
      return;
    }
    inFlight = true;
    fetch(window.location.href, { credentials: "same-origin", cache: "no-store", redirect: "manual" })
      .then(function (answer) {
        if (answer.type === "opaqueredirect") {
          // The session is over: the page itself now leads to sign-in.
          window.location.reload();
          return null;
        }
        return answer.ok ? answer.text() : null;
      })
      .then(function (text) {
        if (text === null) {
          return;
        }
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main[data-live]");
        var now = current();
        if (fresh && now && !edited(now)) {
          now.replaceWith(document.importNode(fresh, true));
          say("updated " + new Date().toLocaleTimeString());
        }
      })
      .catch(function () {
        say("offline");
      })
      .then(function () {
        inFlight = false;
        if (again) {
          again = false;
          schedule();
        }
      });
  }

  // A field put back as it was lets waiting updates in.
  document.addEventListener("input", function () {
    var main = current();
    if (waiting && main && !edited(main)) {
      waiting = false;
      schedule();
    }
  });

  function connect() {
    var source = new EventSource("/console/events");
    var opened = false;
    source.addEventListener("ready", function () {
      // After a reconnect, changes may have been missed: show the page as it is now.
      if (opened) {
        schedule();
      }
      opened = true;
      say("live");
    });
    source.addEventListener("change", schedule);
    source.addEventListener("closed", function () {
      source.close();
      window.location.reload();
    });
    source.addEventListener("error", function () {
      if (source.readyState === EventSource.CLOSED) {
        say("not live");
        window.setTimeout(connect, RETRY_MS);
      } else {
        say("reconnecting");
      }
    });
  }
  connect();
})();
