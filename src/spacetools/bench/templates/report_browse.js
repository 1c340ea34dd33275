(() => {
  const list = document.getElementById('samples');
  const cards = Array.from(list.querySelectorAll('details.sample'));
  const controls = {family: document.getElementById('family'), outcome: document.getElementById('outcome'),
                    order: document.getElementById('order')};
  const rank = {error: 0, fail: 1, pass: 2};
  const byData = (a, b) => a.dataset.order - b.dataset.order;
  const failuresFirst = (a, b) => rank[a.dataset.outcome] - rank[b.dataset.outcome]
    || a.dataset.score - b.dataset.score || byData(a, b);
  function apply() {
    const family = controls.family.value, outcome = controls.outcome.value;
    const sorted = cards.slice().sort(controls.order.value === 'failures' ? failuresFirst : byData);
    const fragment = document.createDocumentFragment();
    let count = 0;
    for (const card of sorted) {
      const visible = (!family || card.dataset.family === family) && (!outcome || card.dataset.outcome === outcome);
      card.hidden = !visible;
      count += visible;
      fragment.appendChild(card);
    }
    list.appendChild(fragment);
    list.dataset.shown = count;
    document.getElementById('shown').textContent = count + ' of ' + cards.length + ' samples shown';
    const state = new URLSearchParams();
    for (const [key, element] of Object.entries(controls)) {
      if (element.value && !(key === 'order' && element.value === 'data')) state.set(key, element.value);
    }
    try { history.replaceState(null, '', '#' + state.toString()); } catch (error) { /* a sandboxed page */ }
  }
  function fromHash() {
    const wanted = new URLSearchParams(location.hash.slice(1));
    for (const [key, element] of Object.entries(controls)) {
      const value = wanted.get(key) ?? (key === 'order' ? 'data' : '');
      if (Array.from(element.options).some((option) => option.value === value)) element.value = value;
    }
  }
  for (const element of Object.values(controls)) element.addEventListener('change', apply);
  // A summary row's link (#family=…&outcome=…) filters the samples and brings them into view.
  window.addEventListener('hashchange', () => {
    fromHash();
    apply();
    document.getElementById('samples-heading').scrollIntoView();
  });
  fromHash();
  apply();
})();
