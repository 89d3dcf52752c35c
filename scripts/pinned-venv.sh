# Sourced by the scripts that run upstream's published Python package. Defines
# `pinned_venv DIR PIN...`: makes DIR a virtual environment holding exactly
# the pinned packages, rebuilt only when the pins change (a stamp file in DIR
# records them), so only the first run needs PyPI.

pinned_venv() {
    local venv="$1"
    shift
    local stamp="$venv/.pins"
    if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$*" ]]; then
        local python
        python="$(command -v python3.11 || command -v python3)"
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$@"
        echo "$*" >"$stamp"
    fi
}
