-- The table the orders plugins (plugins/rust/orders, plugins/go/orders) assume.
create table orders (
  id bigserial primary key,
  customer text not null,
  total numeric(12,2) not null,
  created_at timestamptz not null default now(),
  items jsonb not null default '[]',
  note text
);
