;; wasmgate's Extism kernel: the accessors the PDKs call for every 8 bytes of
;; input and output, compiled as wasm so that a guest reaches them with a
;; wasm-to-wasm call instead of a host call. Everything else about Extism
;; memory (allocation, blocks, output, errors) is done by the host, which owns
;; this module's memory and keeps a header in its first bytes up to date:
;;
;;   offset  8: end of the data region (this memory's size in bytes); data starts at 64
;;   offset 16: offset of the input
;;   offset 24: length of the input
;;
;; Every access is checked against that header, with the reference kernel's
;; outcomes: a load outside the data region returns 0 and a store there is
;; ignored; an input load past the input's length returns 0 (a u64 load
;; returns 0 unless all 8 bytes are input). Offsets below 64 are never in
;; the region, so the guest cannot touch the header; the sums below cannot
;; overflow (the host keeps the input inside the region).
(module
  (memory (export "memory") 1)

  (func (export "load_u8") (param $p i64) (result i32)
    (if (i32.or (i64.lt_u (local.get $p) (i64.const 64))
                (i64.ge_u (local.get $p) (i64.load (i32.const 8))))
      (then (return (i32.const 0))))
    (i32.load8_u (i32.wrap_i64 (local.get $p))))

  (func (export "load_u64") (param $p i64) (result i64)
    (if (i32.or (i64.lt_u (local.get $p) (i64.const 64))
                (i64.gt_u (local.get $p) (i64.sub (i64.load (i32.const 8)) (i64.const 8))))
      (then (return (i64.const 0))))
    (i64.load (i32.wrap_i64 (local.get $p))))

  (func (export "store_u8") (param $p i64) (param $v i32)
    (if (i32.or (i64.lt_u (local.get $p) (i64.const 64))
                (i64.ge_u (local.get $p) (i64.load (i32.const 8))))
      (then (return)))
    (i32.store8 (i32.wrap_i64 (local.get $p)) (local.get $v)))

  (func (export "store_u64") (param $p i64) (param $v i64)
    (if (i32.or (i64.lt_u (local.get $p) (i64.const 64))
                (i64.gt_u (local.get $p) (i64.sub (i64.load (i32.const 8)) (i64.const 8))))
      (then (return)))
    (i64.store (i32.wrap_i64 (local.get $p)) (local.get $v)))

  ;; `at` is relative to the input; written so that no sum can overflow.
  (func (export "input_load_u8") (param $at i64) (result i32)
    (if (i64.ge_u (local.get $at) (i64.load (i32.const 24)))
      (then (return (i32.const 0))))
    (i32.load8_u (i32.wrap_i64 (i64.add (i64.load (i32.const 16)) (local.get $at)))))

  (func (export "input_load_u64") (param $at i64) (result i64)
    (local $len i64)
    (local.set $len (i64.load (i32.const 24)))
    (if (i32.or (i64.gt_u (local.get $at) (local.get $len))
                (i64.lt_u (i64.sub (local.get $len) (local.get $at)) (i64.const 8)))
      (then (return (i64.const 0))))
    (i64.load (i32.wrap_i64 (i64.add (i64.load (i32.const 16)) (local.get $at)))))

  (func (export "input_length") (result i64) (i64.load (i32.const 24)))
  (func (export "input_offset") (result i64) (i64.load (i32.const 16)))
)
