// Keyboard shortcuts of the review panel (tasks/_review_panel.html):
//   j / k   next / previous task in the queue      a   approve
//   r       reject: arms it and picks the reason   n   needs fix: same
//   Ctrl+Enter submits the armed decision (also from the reason list or the comment box)
//   ?       shows the help; Esc leaves a field and closes the help.
// Single keys are off while the reviewer types in an input, textarea, select or editable element.
(function () {
  "use strict";
  if (window.facetReviewKeys) return; // one listener, however many times the panel is included
  window.facetReviewKeys = true;

  function typing(el) {
    if (!el || el === document.body) return false;
    var tag = el.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || el.isContentEditable;
  }

  function decisionForm() {
    return document.getElementById("decision-form");
  }

  function verdictButton(verdict) {
    var form = decisionForm();
    return form && form.querySelector('button[data-verdict="' + verdict + '"]');
  }

  function arm(verdict) {
    var form = decisionForm();
    if (!form) return;
    form.dataset.pending = verdict;
    form.querySelectorAll("button[data-verdict]").forEach(function (b) {
      b.classList.toggle("armed", b.dataset.verdict === verdict);
    });
    var hint = document.getElementById("reason-hint");
    if (hint) hint.hidden = false;
    form.elements.reason.focus();
  }

  // Submits with the verdict's own button, so the POST carries verdict=<value>. A verdict that
  // needs a reason and has none is armed instead: the reason list gets the focus.
  function decide(verdict) {
    var form = decisionForm();
    var button = verdictButton(verdict);
    if (!form || !button || button.disabled || form.dataset.sent) return;
    if (button.dataset.needsReason && !form.elements.reason.value) {
      arm(verdict);
      return;
    }
    form.dataset.sent = "1";
    form.requestSubmit(button);
  }

  function go(formId) {
    var form = document.getElementById(formId);
    if (form && !form.dataset.sent) {
      form.dataset.sent = "1";
      form.requestSubmit();
    }
  }

  function help(show) {
    var box = document.getElementById("shortcut-help");
    if (!box) return;
    box.hidden = show === undefined ? !box.hidden : !show;
  }

  document.addEventListener("submit", function (ev) {
    var form = ev.target;
    if (form.id !== "decision-form") return;
    var button = ev.submitter;
    if (button && button.dataset.needsReason && !form.elements.reason.value) {
      ev.preventDefault();
      delete form.dataset.sent;
      arm(button.dataset.verdict);
    }
  });

  document.addEventListener("keydown", function (ev) {
    if (!document.getElementById("review-panel")) return;
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) {
      var form = decisionForm();
      if (form && form.dataset.pending) {
        ev.preventDefault();
        decide(form.dataset.pending);
      }
      return;
    }
    if (ev.key === "Escape") {
      if (typing(document.activeElement)) document.activeElement.blur();
      help(false);
      return;
    }
    if (ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target) || typing(document.activeElement)) return;
    var actions = {
      j: function () { go("queue-next"); },
      k: function () { go("queue-prev"); },
      a: function () { decide("approve"); },
      r: function () { arm("reject"); },
      n: function () { arm("needs_fix"); },
      "?": function () { help(); },
    };
    var action = actions[ev.key];
    if (action) {
      ev.preventDefault();
      action();
    }
  });
})();
