# /etc/profile.d/tandem.sh (the tandem package): Tandem's Slurm commands (sbatch, squeue, ...,
# links to tandem-slurm) first on PATH, their manual pages with them (man finds
# /usr/lib/tandem/share/man through PATH); Debian's slurm-client, if installed, keeps
# /usr/bin/sbatch. Set TANDEM_SLURM_COMMANDS=no (in /etc/environment or before this file is
# read) to leave PATH alone. On the controller's host, the commands speak to its Unix socket;
# elsewhere, set TANDEM_SERVER=https://CONTROLLER:7200 and a token (`tandem token`).
if [ "${TANDEM_SLURM_COMMANDS:-yes}" != no ]; then
    case ":${PATH}:" in
    *:/usr/lib/tandem/bin:*) ;;
    *) PATH="/usr/lib/tandem/bin:${PATH}" ;;
    esac
fi
if [ -z "${TANDEM_SERVER:-}" ] && [ -S /var/lib/tandem/tandem.sock ]; then
    TANDEM_SERVER=unix:///var/lib/tandem/tandem.sock
    export TANDEM_SERVER
fi
if [ -z "${TANDEM_CA:-}" ] && [ -r /etc/tandem/ca.pem ]; then
    TANDEM_CA=/etc/tandem/ca.pem
    export TANDEM_CA
fi
