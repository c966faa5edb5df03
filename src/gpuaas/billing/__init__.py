"""Billing, pure: what a held device is as a SKU, how a held interval is cut into usage
records (hours, billing periods), how a record is priced; invoices, the allocation view,
budgets, forecasts and FOCUS rows. No I/O, no clock: the service
(:mod:`gpuaas.service.usage`, :mod:`gpuaas.service.prices`, :mod:`gpuaas.service.invoicing`,
:mod:`gpuaas.service.budget_watch`) stores and reads; this package decides. Imports
``model`` (and ``supply``'s device naming) only."""
