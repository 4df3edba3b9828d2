// The live part of a page (data-live) is fetched again every data-every ms and replaced; the
// server renders it with the same escaping as the page. While a fetch fails, the live part is
// dimmed and a note above it says since when and why. "select all" ticks a page's boxes.
(function () {
  'use strict';
  var live = document.querySelector('[data-live]');
  if (live) {
    var every = parseInt(live.dataset.every, 10) || 5000;
    // The server answers by its request timeout (503 past it); a fetch without an answer
    // some seconds after that is given up.
    var timeout = (parseInt(live.dataset.timeout, 10) || 15000) + 5000;
    var note = document.createElement('p');
    note.className = 'stale-note';
    note.setAttribute('role', 'status');
    note.hidden = true;
    live.parentNode.insertBefore(note, live);
    var last = new Date();
    var tick = function () {
      var abort = new AbortController();
      var timer = setTimeout(function () { abort.abort(); }, timeout);
      fetch(live.dataset.live, {credentials: 'same-origin', cache: 'no-store', signal: abort.signal})
        .then(function (r) { return r.ok ? r.text() : Promise.reject(new Error('the dashboard answered HTTP ' + r.status)); })
        .then(function (html) {
          live.innerHTML = html;
          live.dataset.refreshed = String((parseInt(live.dataset.refreshed, 10) || 0) + 1);
          live.classList.remove('stale');
          note.hidden = true;
          last = new Date();
        })
        .catch(function (err) {
          var why = err && err.name === 'AbortError' ? 'the dashboard did not answer in time'
            : err && err.message && err.message.indexOf('HTTP') >= 0 ? err.message
            : 'the dashboard could not be reached';
          live.classList.add('stale');
          note.textContent = 'Not refreshed since ' + last.toLocaleTimeString() + ': ' + why +
            '. What is shown below may be out of date.';
          note.hidden = false;
        })
        .then(function () { clearTimeout(timer); setTimeout(tick, every); });
    };
    setTimeout(tick, every);
  }
  var all = document.getElementById('select-all');
  if (all) {
    all.addEventListener('change', function () {
      document.querySelectorAll('#failed-jobs input[name=id]').forEach(function (b) { b.checked = all.checked; });
    });
  }
})();
