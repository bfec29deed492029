"""A stand-in for `nvidia-cuda-mps-control`, used where no NVIDIA driver exists.

`fake_mps_control.py -d` starts a background daemon that creates CUDA_MPS_PIPE_DIRECTORY, a
`control` FIFO and the `nvidia-cuda-mps-control.pid` file, then serves commands from the FIFO
until `quit`. Without `-d` it is the client: it sends each stdin line to the daemon and fails
(exit 1) when no daemon runs, like the real tool. `get_server_list` prints nothing.
"""

import os
import sys
from pathlib import Path

PID_FILE = "nvidia-cuda-mps-control.pid"


def pipe_dir() -> Path:
    return Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))


def daemon_alive(d: Path) -> bool:
    try:
        pid = int((d / PID_FILE).read_text().split()[0])
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] != "Z"


def serve(d: Path, ready_fd: int) -> None:
    fifo = d / "control"
    if fifo.exists():
        fifo.unlink()
    os.mkfifo(fifo)
    (d / PID_FILE).write_text(f"{os.getpid()}\n")
    log = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", str(d))) / "control.log"
    os.write(ready_fd, b"ok")
    os.close(ready_fd)
    while True:
        with open(fifo) as f:
            for line in f:
                with open(log, "a") as out:
                    out.write(f"{os.environ.get('CUDA_VISIBLE_DEVICES')} {line}")
                if line.strip() == "quit":
                    (d / PID_FILE).unlink(missing_ok=True)
                    fifo.unlink(missing_ok=True)
                    os._exit(0)


def start() -> int:
    d = pipe_dir()
    d.mkdir(parents=True, exist_ok=True)
    if daemon_alive(d):
        print("An instance of this daemon is already running", file=sys.stderr)
        return 1
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.close(r)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            serve(d, w)
        os._exit(0)
    os.close(w)
    os.wait()
    ok = os.read(r, 2) == b"ok"
    return 0 if ok else 1


def client() -> int:
    d = pipe_dir()
    if not daemon_alive(d):
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    for line in sys.stdin:
        cmd = line.strip()
        if not cmd:
            continue
        fd = os.open(d / "control", os.O_WRONLY)
        os.write(fd, (cmd + "\n").encode())
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(start() if "-d" in sys.argv[1:] else client())
