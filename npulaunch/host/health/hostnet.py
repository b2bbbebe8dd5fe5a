"""The host side of HCCL, asked on each host by the preflight probe: does the address ``HCCL_IF_IP``
names exist here, does ``HCCL_SOCKET_IFNAME`` match an interface with an address, and are the host
ports HCCL will listen on free (and reserved against the kernel's ephemeral ports)? Binds sockets to
check and closes them at once: no traffic. Standard library only, Python 3.7.

Sources: hicann/hccl docs/zh/user_guide/hccl_env/HCCL_IF_IP.md, HCCL_SOCKET_IFNAME.md,
HCCL_IF_BASE_PORT.md (32 ports from the base, 60000 by default, "请确保分配的端口未被占用", reserved with
net.ipv4.ip_local_reserved_ports) and HCCL_HOST_SOCKET_PORT_RANGE.md (overrides the base), @ 09300b7;
all four apply when the communicator is built from the root's information (rank-table-free mode).
HCCL listens on one address: CM_WORKER_IP, else HCCL_IF_IP, else the first interface HCCL_SOCKET_IFNAME
picks, else the first that is not lo* or docker* (HCOMM, from the mirror xiaobingling93-pixel/cann-hcomm
@ b5f3e5be, src/platform/common/sal.cc FindLocalHostIP). The check binds the wildcard address, which
fails wherever HCCL's bind would, and reads /proc/net/tcp* to tell a port a listener holds from one a
connection holds.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

DEFAULT_BASE_PORT = 60000
PORT_COUNT = 32
RESERVED_FILE = "/proc/sys/net/ipv4/ip_local_reserved_ports"
EPHEMERAL_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def hccl_env_problems(env: Mapping[str, str]) -> List[List[str]]:
    """``[[name, value, problem], ...]`` for HCCL_IF_IP and HCCL_SOCKET_IFNAME where set ("" = fine)."""
    found = []
    if env.get("HCCL_IF_IP"):
        address = env["HCCL_IF_IP"].strip()
        found.append(["HCCL_IF_IP", address, "" if _is_local(address) else "no interface of this host has it"])
    if env.get("HCCL_SOCKET_IFNAME"):
        import socket  # here, not at import: a plain run checks no interface (2 ms)

        rule = env["HCCL_SOCKET_IFNAME"].strip()
        names = [name for _, name in socket.if_nameindex()]
        chosen = ifname_candidates(rule, names)
        usable = [name for name in chosen if interface_has_address(name)]
        if not chosen:
            problem = f"matches none of this host's interfaces ({', '.join(sorted(names))})"
        elif not usable:
            problem = f"matches {', '.join(chosen)}, none of which has an address"
        else:
            problem = ""
        found.append(["HCCL_SOCKET_IFNAME", rule, problem])
    return found


def ifname_candidates(rule: str, names: Sequence[str]) -> List[str]:
    """The interfaces HCCL_SOCKET_IFNAME lets HCCL use, in ``names`` order: ``eth,enp`` (prefixes),
    ``^eth`` (not these prefixes), ``=eth0,enp0`` (exactly these), ``^=eth0`` (all but these)."""
    exclude = rule.startswith("^")
    body = rule[1:] if exclude else rule
    exact = body.startswith("=")
    items = [item.strip() for item in (body[1:] if exact else body).split(",") if item.strip()]

    def named(name: str) -> bool:
        return name in items if exact else any(name.startswith(item) for item in items)

    return [name for name in names if named(name) != exclude]


def _is_local(address: str) -> bool:
    """Whether ``address`` belongs to this host: only then can a socket be bound to it."""
    import socket

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((address, 0))
        return True
    except (OSError, ValueError):
        return False


def interface_has_address(name: str) -> bool:
    """An IPv4 address (SIOCGIFADDR) or an IPv6 one (/proc/net/if_inet6) on the interface."""
    import fcntl
    import socket
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))  # SIOCGIFADDR
        return True
    except OSError:
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as handle:
            return any(line.split()[-1:] == [name] for line in handle)
    except OSError:
        return False


def hccl_ports(env: Mapping[str, str]) -> Tuple[List[int], str]:
    """The host ports HCCL listens on in rank-table-free mode and what decided them:
    HCCL_HOST_SOCKET_PORT_RANGE ("60000-60050,60100"; "auto": the kernel picks, nothing to check),
    else 32 ports from HCCL_IF_BASE_PORT (default 60000)."""
    given = (env.get("HCCL_HOST_SOCKET_PORT_RANGE") or "").strip()
    if given:
        if given == "auto":
            return [], "HCCL_HOST_SOCKET_PORT_RANGE=auto"
        ports: List[int] = []
        for item in given.split(","):
            low, _, high = item.strip().partition("-")
            if low.isdigit() and (not high or high.isdigit()):
                ports.extend(range(int(low), int(high or low) + 1))
        return ports, f"HCCL_HOST_SOCKET_PORT_RANGE={given}"
    base = (env.get("HCCL_IF_BASE_PORT") or "").strip()
    first = int(base) if base.isdigit() else DEFAULT_BASE_PORT
    where = f"HCCL_IF_BASE_PORT={base}" if base.isdigit() else f"HCCL's default base port {DEFAULT_BASE_PORT}"
    return list(range(first, first + PORT_COUNT)), where


def port_facts(env: Mapping[str, str], wanted: bool, chief_port: Optional[int]) -> Optional[Dict[str, Any]]:
    """Which of HCCL's host ports (and the rank-table-free chief's port) something holds already, and
    which lie in the kernel's ephemeral range without being reserved; None when not asked."""
    if not wanted and chief_port is None:
        return None
    ports, source = hccl_ports(env) if wanted else ([], "")
    reserved = _port_set(_read(RESERVED_FILE))
    low_high = (_read(EPHEMERAL_FILE) or "").split()
    ephemeral = range(int(low_high[0]), int(low_high[1]) + 1) if len(low_high) == 2 else range(0)
    busy = [port for port in ports if not port_free(port)]
    holders = port_holders(busy) if busy else {}
    return {
        "source": source,
        "first": ports[0] if ports else None,
        "last": ports[-1] if ports else None,
        "busy": busy,
        # busy ports that no socket listens on: connections hold them (HCCL's bind fails all the same)
        "connections": [port for port in busy if holders.get(port) == "connection"],
        "unreserved": [port for port in ports if port in ephemeral and port not in reserved],
        "chief_port": chief_port,
        "chief_busy": bool(chief_port) and not port_free(int(chief_port or 0)),
    }


def port_free(port: int) -> bool:
    """Whether a TCP socket can be bound to ``port`` on every IPv4 address right now (SO_REUSEADDR, as
    servers set it: a port in TIME_WAIT counts as free, one that is listened on or bound does not)."""
    import socket

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False


def port_holders(ports: Sequence[int]) -> Dict[int, str]:
    """What holds each of ``ports`` per /proc/net/tcp and tcp6: "listener" (a socket listens on it) or
    "connection" (only connections, such as an outgoing one the kernel gave the port from its ephemeral
    range); absent when neither file lists the port or neither can be read."""
    wanted = set(ports)
    found: Dict[int, str] = {}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (_read(path) or "").splitlines()[1:]:
            fields = line.split()  # sl local_address rem_address st ...; local_address is HEX:PORT
            port_hex = fields[1].rpartition(":")[2] if len(fields) > 3 else ""
            try:
                port = int(port_hex, 16)
            except ValueError:
                continue
            if port in wanted and found.get(port) != "listener":
                found[port] = "listener" if fields[3] == "0A" else "connection"
    return found


def _port_set(text: Optional[str]) -> set:
    ports: set = set()
    for item in (text or "").replace("\n", ",").split(","):
        low, _, high = item.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            ports.update(range(int(low), int(high or low) + 1))
    return ports


def _read(path: str) -> Optional[str]:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read()
    except OSError:
        return None
