"""Package layout that pyproject.toml cannot say: the alembic environment kept in `migrate/`
at the top of the repository ships inside chronod as `chronod._migrate`, so an installed
chrono (wheel or `pip install .`) can create and upgrade its database. Everything else
about the distribution is in pyproject.toml."""

from setuptools import find_packages, setup

MIGRATIONS = "chronod._migrate"

setup(
    packages=find_packages(include=["chronod", "chronod.*", "chronoctl", "chronoctl.*"])
    + [MIGRATIONS, f"{MIGRATIONS}.versions"],
    package_dir={MIGRATIONS: "migrate"},
    package_data={MIGRATIONS: ["script.py.mako"], "chronoctl.web": ["templates/*.html", "static/*"]},
)
