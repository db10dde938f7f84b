"""Each framework's own settings, torch-free: one module per framework (``<name>.py``), named by the
``settings`` entry of the framework's ``SPEC`` (:mod:`focalcse.core.frameworks`). A train item depends
on its own framework's settings module only, so a new setting of one framework reruns no other's items.
"""
