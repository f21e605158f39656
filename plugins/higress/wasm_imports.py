#!/usr/bin/env python3
"""Lists the function imports (module.name (params) -> (results)) and the
proxy_* / _initialize exports of wasm modules; reads only the type, import,
function and export sections. Usage: wasm_imports.py FILE.wasm..."""
import sys

VALTYPES = {0x7F: "i32", 0x7E: "i64", 0x7D: "f32", 0x7C: "f64", 0x7B: "v128"}


class Reader:
    def __init__(self, data, pos=0):
        self.data, self.pos = data, pos

    def byte(self):
        b = self.data[self.pos]
        self.pos += 1
        return b

    def uleb(self):
        result = shift = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return result

    def name(self):
        n = self.uleb()
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def limits(self):
        flags = self.uleb()
        self.uleb()
        if flags & 1:
            self.uleb()


def sig(t):
    params, results = t
    return "(%s) -> (%s)" % (", ".join(params), ", ".join(results))


def inspect(path):
    data = open(path, "rb").read()
    if data[:4] != b"\0asm":
        raise SystemExit("%s: not a wasm module" % path)
    r = Reader(data, 8)
    types, imports, funcs, exports = [], [], [], []
    imported_funcs = 0
    while r.pos < len(data):
        section, size = r.byte(), r.uleb()
        end = r.pos + size
        if section == 1:  # types
            for _ in range(r.uleb()):
                assert r.byte() == 0x60
                params = [VALTYPES[r.byte()] for _ in range(r.uleb())]
                results = [VALTYPES[r.byte()] for _ in range(r.uleb())]
                types.append((params, results))
        elif section == 2:  # imports
            for _ in range(r.uleb()):
                module, field, kind = r.name(), r.name(), r.byte()
                if kind == 0:
                    imports.append((module, field, sig(types[r.uleb()])))
                    imported_funcs += 1
                elif kind == 1:
                    r.byte()
                    r.limits()
                    imports.append((module, field, "table"))
                elif kind == 2:
                    r.limits()
                    imports.append((module, field, "memory"))
                elif kind == 3:
                    r.byte()
                    r.byte()
                    imports.append((module, field, "global"))
        elif section == 3:  # functions
            funcs = [r.uleb() for _ in range(r.uleb())]
        elif section == 7:  # exports
            for _ in range(r.uleb()):
                field, kind, index = r.name(), r.byte(), r.uleb()
                if kind == 0 and index >= imported_funcs:
                    exports.append((field, sig(types[funcs[index - imported_funcs]])))
                else:
                    exports.append((field, {0: "func", 1: "table", 2: "memory", 3: "global"}[kind]))
        r.pos = end
    return imports, exports


def main():
    for path in sys.argv[1:]:
        imports, exports = inspect(path)
        print("%s: %d imports" % (path, len(imports)))
        for module, field, what in imports:
            print("  import %s.%s %s" % (module, field, what))
        for field, what in exports:
            if field.startswith("proxy_") or field in ("_initialize", "memory", "main", "_start"):
                print("  export %s %s" % (field, what))


if __name__ == "__main__":
    main()
