;; shout: an Extism plugin written by hand. Its one function, `shout`,
;; returns its input with the ASCII letters a-z made capitals.
;;
;; The plugin reads its input and writes its output through the Extism kernel,
;; the host functions of module "extism:host/env". Offsets into the kernel's
;; memory are i64.
(module
  (import "extism:host/env" "input_length" (func $input_length (result i64)))
  (import "extism:host/env" "input_load_u8" (func $input_load_u8 (param i64) (result i32)))
  (import "extism:host/env" "alloc" (func $alloc (param i64) (result i64)))
  (import "extism:host/env" "store_u8" (func $store_u8 (param i64 i32)))
  (import "extism:host/env" "output_set" (func $output_set (param i64 i64)))

  (func (export "shout") (result i32)
    (local $n i64)     ;; input length
    (local $i i64)     ;; position
    (local $out i64)   ;; the output block in the kernel's memory
    (local $c i32)     ;; the current byte
    (local.set $n (call $input_length))
    (local.set $out (call $alloc (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (local.set $c (call $input_load_u8 (local.get $i)))
        ;; 'a' (97) .. 'z' (122) -> 'A' .. 'Z'
        (if (i32.and (i32.ge_u (local.get $c) (i32.const 97))
                     (i32.le_u (local.get $c) (i32.const 122)))
          (then (local.set $c (i32.sub (local.get $c) (i32.const 32)))))
        (call $store_u8 (i64.add (local.get $out) (local.get $i)) (local.get $c))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $next)))
    (call $output_set (local.get $out) (local.get $n))
    (i32.const 0))) ;; 0: success
