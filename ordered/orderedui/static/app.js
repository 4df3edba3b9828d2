// The live part of a page (data-live) is fetched again every data-every ms and replaced; the
// server renders it with the same escaping as the page. "select all" ticks a page's boxes.
(function () {
  'use strict';
  var live = document.querySelector('[data-live]');
  if (live) {
    var every = parseInt(live.dataset.every, 10) || 5000;
    var tick = function () {
      fetch(live.dataset.live, {credentials: 'same-origin', cache: 'no-store'})
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) {
          live.innerHTML = html;
          live.dataset.refreshed = String((parseInt(live.dataset.refreshed, 10) || 0) + 1);
          live.classList.remove('stale');
        })
        .catch(function () { live.classList.add('stale'); })
        .then(function () { setTimeout(tick, every); });
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
