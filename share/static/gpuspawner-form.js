// gpuspawner's spawn form (share/templates/form.html): what the form's controls do. Served by the
// hub at /hub/gpuspawner/static/ (gpuspawner/hub/form_assets.py); the form works without it.
(function () {
  "use strict";
  var root = document.getElementById("kubespawner-profiles-list");
  if (!root) { return; }
  function selectProfile(el) {
    var slug = el.getAttribute("data-gs-profile");
    var radio = slug && document.getElementById("profile-item-" + slug);
    if (radio) { radio.checked = true; }
  }
  function limitCount(poolRadio) {
    var slug = poolRadio.getAttribute("data-gs-profile");
    var select = document.getElementById("profile-option-" + slug + "--gpus");
    if (!select) { return; }
    var max = parseInt(poolRadio.getAttribute("data-gs-max"), 10) || 0;
    for (var i = 0; i < select.options.length; i++) {
      var opt = select.options[i];
      opt.disabled = parseInt(opt.value, 10) > max;
      if (opt.disabled && opt.selected) { select.value = String(max); }
    }
  }
  function toggleUnlisted(select) {
    var box = root.querySelector('.gs-unlisted[data-gs-for="' + select.id + '"]');
    if (!box) { return; }
    box.hidden = select.value !== "unlisted-choice";
    // a hidden free-text value must not be posted: KubeSpawner gives it precedence
    Array.prototype.forEach.call(box.querySelectorAll("input"), function (i) { i.disabled = box.hidden; });
  }
  function showImageFit(select) {
    var lines = root.querySelectorAll('[data-gs-image-field="' + select.id + '"]');
    Array.prototype.forEach.call(lines, function (line) {
      line.hidden = line.getAttribute("data-gs-image-choice") !== select.value;
    });
  }
  root.addEventListener("change", function (ev) {
    var el = ev.target;
    if (el.name && el.name.indexOf("profile-option-") === 0) { selectProfile(el); }
    if (el.type === "radio" && el.hasAttribute("data-gs-max")) { limitCount(el); }
    if (el.tagName === "SELECT") { toggleUnlisted(el); showImageFit(el); }
  });
  root.addEventListener("focusin", function (ev) {
    if (ev.target.name && ev.target.name.indexOf("profile-option-") === 0) { selectProfile(ev.target); }
  });
  Array.prototype.forEach.call(root.querySelectorAll("input[data-gs-max]:checked"), limitCount);
  Array.prototype.forEach.call(root.querySelectorAll("select.gs-select"), function (select) {
    toggleUnlisted(select);
    showImageFit(select);
  });
})();
