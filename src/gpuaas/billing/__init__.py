"""Billing, pure: what a held device is as a SKU, how a held interval is cut into usage
records (hours, billing periods), and how a record is priced. No I/O, no clock: the service
(:mod:`gpuaas.service.usage`, :mod:`gpuaas.service.prices`) stores and reads; this package
decides. Imports ``model`` only."""
