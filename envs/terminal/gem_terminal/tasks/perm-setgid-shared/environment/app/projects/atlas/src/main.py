print('atlas')
