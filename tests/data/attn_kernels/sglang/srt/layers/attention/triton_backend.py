class TritonAttnBackend:
    def __init__(self, model_runner):
        self.page_size = model_runner.page_size
