"""chrono's web console (`chronoctl web`) and the HTML audit report (`report --format html`).

Flask views and Jinja2 templates (auto-escaping) served by waitress; the stylesheet and the
one small script ship in `static/`. See docs/web.md."""
