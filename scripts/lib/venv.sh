# A virtualenv under target/ holding pinned PyPI packages: the part scripts/ensure-*.sh share.
# Sourced, not run. Every message goes to stderr, so a script's stdout stays the one path it
# prints; a failure ends the sourcing script (exit 1).

# venv_install TAG VENV PYTHON PACKAGE==VERSION...
#   Creates the virtualenv VENV with the interpreter PYTHON unless VENV/bin/python exists
#   (Debian and Ubuntu ship venv's ensurepip separately: python3-venv is installed with apt-get
#   when `PYTHON -m venv` fails), then pip-installs the pinned packages into it. TAG prefixes
#   the progress messages. What the packages installed is for the caller to check.
venv_install() {
    local tag="$1" venv="$2" python="$3"
    shift 3
    if ! command -v "$python" >/dev/null 2>&1; then
        echo "$tag: $python is not on PATH; it is needed to install $* from PyPI" >&2
        exit 1
    fi

    if [[ ! -x "$venv/bin/python" ]]; then
        echo "$tag: creating virtualenv $venv" >&2
        mkdir -p "$(dirname "$venv")"
        rm -rf "$venv"
        if ! "$python" -m venv "$venv" >&2; then
            if command -v apt-get >/dev/null 2>&1; then
                echo "$tag: python venv support missing, installing python3-venv" >&2
                local sudo=""
                if [[ "$(id -u)" -ne 0 ]]; then
                    sudo="sudo"
                fi
                $sudo apt-get update >&2
                $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y python3-venv >&2
                rm -rf "$venv"
                "$python" -m venv "$venv" >&2
            else
                echo "$tag: '$python -m venv' failed; install Python's venv module" >&2
                exit 1
            fi
        fi
    fi

    echo "$tag: installing $* into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$@" >&2
}
