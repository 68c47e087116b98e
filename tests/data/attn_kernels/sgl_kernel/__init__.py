# imitates sgl_kernel/__init__.py: the package marker the locator looks for
