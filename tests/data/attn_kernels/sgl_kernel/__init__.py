# imitates sgl_kernel/__init__.py: the package marker the locator looks for
from sgl_kernel.attention import cutlass_mla_decode  # noqa: F401
