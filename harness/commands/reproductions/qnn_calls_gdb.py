"""gdb script (x86_64): the QNN calls that create and free backends, devices and log handles,
read through the real library's function table (libQnnHtp.so exports only
QnnInterface_getProviders). At QnnInterface_getProviders' return it puts a breakpoint on table
entries 1 (backendCreate), 8 (backendFree), 25 (logCreate), 27 (logFree), 40 (deviceCreate) and
43 (deviceFree) of the first provider (QnnInterface.h order, the table at byte 40), and at exit
prints one `QNNCALL name arg0=... [out=...]` line per call: arg0 is the first argument (the log
handle a backend or device is created with, the handle a free frees), out the handle created.

    gdb -q -batch -x qnn_calls_gdb.py --args /path/to/python script.py ...
"""
import gdb

TABLE = {1: "backend_create", 8: "backend_free", 25: "log_create", 27: "log_free",
         40: "device_create", 43: "device_free"}
OUT_ARG = {"backend_create": "$rdx", "log_create": "$rdx", "device_create": "$rdx"}
events = []
armed = set()


def u64(addr):
    return int.from_bytes(bytes(gdb.selected_inferior().read_memory(addr, 8)), "little")


class Returned(gdb.FinishBreakpoint):
    def __init__(self, name, args, out):
        super().__init__(gdb.newest_frame(), internal=True)
        self.name, self.args, self.out = name, args, out

    def stop(self):
        events.append((self.name, self.args, u64(self.out) if self.out else None))
        return False

    def out_of_scope(self):
        pass


class Call(gdb.Breakpoint):
    def __init__(self, addr, name):
        super().__init__(f"*{addr:#x}", internal=True)
        self.name = name

    def stop(self):
        args = (int(gdb.parse_and_eval("$rdi")) & 0xFFFFFFFFFFFFFFFF,)
        if self.name in OUT_ARG:
            Returned(self.name, args, int(gdb.parse_and_eval(OUT_ARG[self.name])))
        else:
            events.append((self.name, args, None))
        return False


class ProvidersReturned(gdb.FinishBreakpoint):
    def __init__(self, out):
        super().__init__(gdb.newest_frame(), internal=True)
        self.out = out

    def stop(self):
        first = u64(u64(self.out))
        for index, name in TABLE.items():
            fn = u64(first + 40 + 8 * index)
            if fn and fn not in armed:
                armed.add(fn)
                Call(fn, name)
        return False


class Providers(gdb.Breakpoint):
    def stop(self):
        ProvidersReturned(int(gdb.parse_and_eval("$rdi")))
        return False


def report(event):
    for name, args, out in events:
        print(f"QNNCALL {name} arg0={args[0]:#x} out={out:#x}" if out is not None
              else f"QNNCALL {name} arg0={args[0]:#x}")


gdb.execute("set breakpoint pending on")
gdb.execute("set pagination off")
gdb.execute("set confirm off")
gdb.execute("handle SIGPIPE nostop noprint pass")
Providers("QnnInterface_getProviders", internal=True)
gdb.events.exited.connect(report)
gdb.execute("run")
